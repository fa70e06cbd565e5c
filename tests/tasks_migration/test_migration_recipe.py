"""The migration pack's configs compose: the CPU one it runs with here, and the Qwen3-8B GPU
recipe (Tinker trainer) that cannot run here."""

from __future__ import annotations

from pathlib import Path

from agentcore_rl_harness.config import compose_config

CONFIGS = Path(__file__).resolve().parents[2] / "tasks" / "migration" / "configs"


def composed_kind(source):
    return compose_config(source=source).resolved["trainer"]["kind"]


def test_the_cpu_config_leaves_room_for_a_whole_file():
    composed = compose_config(source=CONFIGS)
    typed = composed.typed
    assert typed.sampling.max_tokens == 512 and typed.model.name == "smollm2-135m-instruct"
    assert composed.resolved["algo"]["group_size"] == 4
    assert composed_kind(CONFIGS) == "local"


def test_the_qwen3_8b_tinker_recipe_composes():
    composed = compose_config(source=CONFIGS / "qwen3-8b-tinker.yaml")
    typed = composed.typed
    trainer, loop = typed.trainer.trainer, typed.trainer.loop
    assert composed.resolved["trainer"]["kind"] == "tinker" and type(trainer).__name__.startswith("Tinker")
    assert trainer.base_model == "Qwen/Qwen3-8B" and trainer.lora_rank == 32 and loop.steps == 60
    assert typed.model.name == "models/qwen3-8b" and typed.sampling.max_tokens == 4096
    assert composed.resolved["algo"]["group_size"] == 8 and typed.gateway.history == "exact"


def test_the_recipe_takes_overrides_like_any_config():
    typed = compose_config(["trainer.lr=1e-5", "model.name=/models/q"], source=CONFIGS / "qwen3-8b-tinker.yaml").typed
    assert typed.trainer.trainer.lr == 1e-5 and typed.model.name == "/models/q"


def test_the_cli_agents_gpu_recipe_composes(monkeypatch):
    """Codex CLI / Claude Code with Qwen3-8B on a CUDA vLLM: the CLIs bound into each session."""
    monkeypatch.setenv("AGENTCORE_RL_CLI_AGENTS", "/opt/cli-agents")
    composed = compose_config(["agent=tasks/migration/claude_code_agent.py"],
                              source=CONFIGS / "cli-agents-qwen3-8b-vllm.yaml")
    typed, resolved = composed.typed, composed.resolved
    assert resolved["agent"] == "tasks/migration/claude_code_agent.py"
    assert resolved["sampler"]["kind"] == "vllm" and typed.model.name == "models/qwen3-8b"
    assert resolved["sampler"]["vllm"]["max_model_len"] == 32768 and resolved["trainer"]["device"] == "cuda"
    assert typed.runtime.readable_paths == ("/opt/cli-agents",)
    assert typed.runtime.env_passthrough == ("AGENTCORE_RL_CLI_AGENTS", "AGENTCORE_RL_CLI_CONTEXT_WINDOW")
