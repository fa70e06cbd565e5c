"""Shared pieces for the external-trainer adapters: a toy task on disk and synthetic rollouts."""

import json

import pytest
from toy_project import AGENT

from agentcore_rl_harness.records import Rollout, Status, Trace, Usage


TASK = '''
import agentcore_rl_harness as arl

@arl.reward
def replied(rollout, row):
    return float(bool(rollout.result.get("reply")))

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2, rewards=[replied])
def test_toy(rollout, row):
    assert rollout.reward == 1.0
'''


@pytest.fixture
def toy_task_dir(tmp_path):
    """A project folder with one task `test_toy` (4 train rows, 2 test rows) and its agent."""
    rows = [{"id": f"r{i}", "split": "train" if i < 4 else "test", "question": f"Say {i}"}
            for i in range(6)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "test_toy.py").write_text(TASK)
    return tmp_path


def make_trace(prompt, response, mask, *, finish="stop", logprob=-0.5):
    return Trace(
        token_ids=tuple(prompt) + tuple(response),
        prompt_length=len(prompt),
        loss_mask=tuple(mask),
        logprobs=tuple(logprob if m else None for m in mask),
        finish_reason=finish,
    )


def make_rollout(traces, *, reward=1.0, status=Status.COMPLETED, session_id="s-1", row_id="r0"):
    return Rollout(
        run_id="test", task="test_toy", row_id=row_id, sample_index=0, group_id=f"test_toy/{row_id}/train",
        phase="train", step=None, session_id=session_id, status=status,
        error=None if status is Status.COMPLETED else "boom", reward=reward, rewards={"replied": reward},
        success=status is Status.COMPLETED, result={}, turns=len(traces), usage=Usage(), elapsed_s=0.5,
        traces=tuple(traces),
    )


@pytest.fixture
def trace_factory():
    return make_trace


@pytest.fixture
def rollout_factory():
    return make_rollout
