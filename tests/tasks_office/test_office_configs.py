"""The office pack's configs compose: its CPU config and the Qwen3-4B / Tinker GPU recipe."""

from __future__ import annotations

import pytest
from office_pack import PACK

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError

RECIPE = PACK / "configs" / "qwen3-4b-tinker.yaml"


def test_the_gpu_recipe_composes_to_qwen3_4b_on_tinker(monkeypatch):
    monkeypatch.setenv("QWEN3_4B_DIR", "/data/qwen3-4b")
    typed = compose_config([], source=RECIPE).typed
    assert typed.model.name == "/data/qwen3-4b" and typed.model.dtype == "bfloat16"
    section = typed.trainer
    assert section.trainer.kind == "tinker" and section.trainer.base_model == "Qwen/Qwen3-4B"
    assert section.trainer.api_key_env == "TINKER_API_KEY"  # the key never sits in the file
    assert (section.loop.steps, section.loop.batch_rows, section.loop.group_size) == (60, 16, 8)
    assert typed.sampling.max_tokens == 1024 and typed.eval.samples == 4
    assert section.dropped == ()


def test_the_gpu_recipe_takes_overrides_and_refuses_typos():
    typed = compose_config(["trainer.lr=1e-5", "trainer.steps=2"], source=RECIPE).typed
    assert typed.trainer.trainer.lr == 1e-5 and typed.trainer.loop.steps == 2
    with pytest.raises(ConfigError, match="lora_rnak"):
        compose_config(["trainer.lora_rnak=8"], source=RECIPE)


def test_the_cpu_config_leaves_the_recipe_its_choices():
    """The pack's config sets what its agent and evaluation need and leaves dtypes, max_tokens,
    LoRA and the warm-up to recipe=auto (no recipe file: lift.yaml is the old hand-tuned one)."""
    typed = compose_config([], source=PACK / "configs").typed
    default = compose_config([]).typed
    assert typed.model.name == "smollm2-135m-instruct"
    assert typed.recipe == default.recipe and typed.recipe.kind == "auto"
    assert typed.sampling == default.sampling and typed.warmup == default.warmup
    assert typed.trainer == default.trainer
    assert (typed.eval.samples, typed.eval.temperature, typed.eval.split) == (1, 0, "test")
    assert typed.runtime.concurrency == 16 and typed.sampler.max_batch_size == 16
