"""Declared seams: optional capabilities are default methods on the Protocol every implementation
subclasses, so no caller in the package probes for them with getattr or inspect.signature."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import agentcore_rl_harness
from agentcore_rl_harness.records import SessionOutcome, Status
from agentcore_rl_harness.runtimes.base import AgentRuntime
from agentcore_rl_harness.runtimes.fake import FakeRuntime
from agentcore_rl_harness.trainers.base import Trainer
from agentcore_rl_harness.trainers.fake import RecordingTrainer

ROOT = Path(agentcore_rl_harness.__file__).parent
SEAM_NAMES = ("live_sessions", "kept", "keep_state", "sft_step", "sft_loss", "restore")


def test_no_caller_probes_a_runtime_or_trainer_seam():
    probes = []
    for path in sorted(ROOT.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for name in SEAM_NAMES:
                if re.search(rf"(getattr|hasattr)\([^)]*[\"']{name}[\"']", line) or (
                        "inspect.signature" in line and "run_session" in line):
                    probes.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert probes == []


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
