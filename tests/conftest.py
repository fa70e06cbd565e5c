import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

# Imported once here so in-process pytester runs don't re-import numpy or torch (whose C
# extensions cannot load twice): pytester drops modules first imported inside an inner run.
import datasets  # noqa: F401,E402
import torch  # noqa: F401,E402

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The `tiny` model folder (built locally from a config, same tokenizer/template as SmolLM2)."""
    from agentcore_rl_harness.models import prepare_model

    return prepare_model("tiny")


# Tests of optional integrations skip where their package is missing (a developer's machine);
# CI installs them (.ci/install), so there a missing one fails the run instead of skipping.
CI_REQUIRED_MODULES = ("verl.experimental.agent_loop.agent_loop", "sagemaker.train.training_session", "tinker")


def pytest_sessionstart(session):
    if not os.environ.get("CI"):
        return
    import importlib

    missing = []
    for name in CI_REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        raise pytest.UsageError(f"CI needs these installed by .ci/install: {', '.join(missing)}")
