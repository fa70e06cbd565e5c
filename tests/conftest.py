import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

# Imported once here so in-process pytester runs don't re-import numpy (which cannot load twice).
import datasets  # noqa: F401,E402

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The `tiny` model folder (built locally from a config, same tokenizer/template as SmolLM2)."""
    from agentcore_rl_harness.models import prepare_model

    return prepare_model("tiny")
