"""Fakes for the run core's tests: a task on a tmp dataset, FakeRuntime agents that call the
gateway like real ones, and a trainer that records its steps (imported by tests/run/*)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

import agentcore_rl_harness as arl
from agentcore_rl_harness.tasks import task_spec
from agentcore_rl_harness.trainers.fake import RecordingTrainer  # noqa: F401 (tests/run/* import it from here)

FAST = ["report.progress=off", "runtime.concurrency=4", "eval.timeout_s=20"]


def write_rows(path: Path, *, test: int = 2, train: int = 0) -> Path:
    rows = [{"id": f"r{i}", "split": "train" if i < train else "test", "question": f"Say {i}"}
            for i in range(train + test)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def make_spec(tmp_path: Path, body=None, *, samples: int = 2, rewards=(), test: int = 2, train: int = 0,
              name: str = "toy"):
    """A task over a tmp dataset; the body passes when the reward is 1."""
    dataset = write_rows(tmp_path / f"{name}.jsonl", test=test, train=train)

    def test_toy(rollout, row):
        assert rollout.reward == 1.0

    return task_spec(arl.task(dataset=str(dataset), samples=samples, rewards=rewards, name=name)(body or test_toy))


@arl.reward
def said_four(rollout, row):
    return float("4" in rollout.result.get("reply", ""))


async def ask_gateway(session):
    """A FakeRuntime handler that behaves like a one-turn agent: one chat completion."""
    async with httpx.AsyncClient(base_url=session.base_url, timeout=20) as client:
        response = await client.post("/chat/completions", headers={"Authorization": f"Bearer {session.api_key}"},
                                     json={"model": "m", "messages": [{"role": "user", "content": "2+2?"}]})
        response.raise_for_status()
        return {"reply": response.json()["choices"][0]["message"]["content"]}

