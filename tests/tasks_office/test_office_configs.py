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


def test_the_cpu_config_leaves_room_for_office_tool_calls():
    typed = compose_config([], source=PACK / "configs").typed
    assert typed.model.name == "smollm2-135m-instruct" and typed.sampling.max_tokens >= 160
    assert typed.eval.samples == 2 and typed.eval.split == "test"
