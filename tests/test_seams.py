"""Declared seams: optional capabilities are default methods on the Protocol every implementation
subclasses, so no caller in the package probes for them with getattr or inspect.signature."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

import agentcore_rl_harness
from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.forcing import forced_sample
from agentcore_rl_harness.gateway.rendering import Renderer
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.records import SampleResult, SamplingParams
from agentcore_rl_harness.records import SessionOutcome, Status
from agentcore_rl_harness.runtimes.base import AgentRuntime
from agentcore_rl_harness.runtimes.fake import FakeRuntime
from agentcore_rl_harness.trainers.base import Trainer, TrainerNode
from agentcore_rl_harness.trainers.grpo import GRPOConfig
from agentcore_rl_harness.trainers.fake import RecordingTrainer

ROOT = Path(agentcore_rl_harness.__file__).parent
SEAM_NAMES = ("live_sessions", "kept", "keep_state", "sft_step", "sft_loss", "restore", "score", "policy_version",
              "render_normalized", "check_algo")
# `close` is probed only where a third-party SDK may lack it (tinker < 0.38); never on a sampler.
SAMPLER_CLOSE_PROBE = re.compile(r"(getattr|hasattr)\((self\.)?_?(sampler|backend)\b[^)]*[\"']close[\"']")


def test_no_caller_probes_a_runtime_trainer_or_sampler_seam():
    probes = []
    for path in sorted(ROOT.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if any(re.search(rf"(getattr|hasattr)\([^)]*[\"']{name}[\"']", line) for name in SEAM_NAMES) or (
                    SAMPLER_CLOSE_PROBE.search(line) or ("inspect.signature" in line and "run_session" in line)):
                probes.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert probes == []


def test_a_renderer_and_a_trainer_node_have_their_optional_parts_by_default():
    class Plain(Renderer):
        def render(self, messages, *, tools=None, add_generation_prompt=True):
            return f"{len(messages)} messages, generation prompt {add_generation_prompt}"

    messages = [{"role": "user", "content": "hi"}]
    assert Plain().render_normalized(messages, add_generation_prompt=False) == "1 messages, generation prompt False"
    TrainerNode().check_algo(GRPOConfig(kl_coef=0.5))  # a trainer honours every algo setting unless it says


def test_the_fake_runtime_keeps_nothing_and_counts_no_live_session():
    runtime = FakeRuntime(lambda session: {"ok": True})
    assert isinstance(runtime, AgentRuntime)
    outcome = SessionOutcome(status=Status.COMPLETED, result={}, error=None, elapsed_s=0.0)
    assert runtime.kept(outcome, session_id="s") is None and runtime.live_sessions == 0


def test_the_recording_trainer_records_steps_supervised_steps_and_close(tmp_path):
    trainer = RecordingTrainer()
    assert isinstance(trainer, Trainer)
    metrics = asyncio.run(trainer.step(groups=[]))
    assert (metrics.step, metrics.policy_version, trainer.steps) == (1, 1, [[]])
    trainer.save_checkpoint(tmp_path / "step-1")
    assert trainer.load_checkpoint(tmp_path / "step-1") == 1 and trainer.saved == [tmp_path / "step-1"]
    assert trainer.sft_step([], lr=0.1).lr == 0.1 and trainer.sft_batches == [[]]
    trainer.close()
    assert trainer.closed


def test_a_trainer_releases_nothing_by_default():
    class Minimal(Trainer):
        policy_version = 0

    assert Minimal().close() is None


def test_every_shipped_sampler_subclasses_the_seam():
    """Read from the source (no sampler module is imported): a class with `async def sample`."""
    samplers, outside = [], []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name != "SamplingBackend" and any(
                    isinstance(item, ast.AsyncFunctionDef) and item.name == "sample" for item in node.body):
                samplers.append(node.name)
                if "SamplingBackend" not in {ast.unparse(base) for base in node.bases}:
                    outside.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert {"HFLocalSampler", "ScriptedSampler", "VLLMSampler", "TinkerSampler", "NoTokens"} <= set(samplers)
    assert outside == []


class _Plain(SamplingBackend):
    """Samples only: no weights version, no scoring, nothing to close (the seam's defaults)."""

    async def sample(self, *, prompt_token_ids, params, on_token=None):
        return SampleResult(token_ids=(1,), logprobs=(-0.1,), finish_reason="stop", policy_version=0)


def test_a_sampler_that_only_samples_keeps_no_version_and_says_it_cannot_score():
    sampler = _Plain()
    assert isinstance(sampler, SamplingBackend) and sampler.policy_version is None and sampler.close() is None
    with pytest.raises(SamplingError, match="the _Plain sampler cannot score a completion; scoring needs"):
        asyncio.run(sampler.score(prompt_token_ids=[1], completion_token_ids=[2]))


def test_a_forced_turn_from_a_sampler_that_cannot_score_has_zero_logprobs_and_the_run_version(tiny_model_dir):
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
    from agentcore_rl_harness.models import load_tokenizer

    renderer = ChatTemplateRenderer(load_tokenizer(tiny_model_dir), chat_template=load_template())
    messages = [{"role": "user", "content": "hi"}]
    prompt = renderer.encode(renderer.render(messages))
    result, source = asyncio.run(forced_sample(
        sampler=_Plain(), renderer=renderer, prompt_token_ids=prompt, messages=messages,
        reply={"role": "assistant", "content": "hello"}, index=0, tools=None,
        params=SamplingParams(temperature=1.0), policy_version=7))
    assert source == "zero" and set(result.logprobs) == {0.0} and result.policy_version == 7
