"""A toy task project on disk for end-to-end tests: one agent that asks the gateway one question
(the real `openai` SDK) and a task file, plus its dataset. Imported by tests in any folder
(tests/ is on sys.path through its conftest).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

AGENT = '''
import time
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    time.sleep(payload.get("sleep", 0))  # a row may keep its rollout in flight for a while
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    reply = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": payload["question"]}])
    return {"reply": reply.choices[0].message.content or "", "n": payload.get("n")}
'''


def even_length_task(samples: int) -> str:
    """`test_toy`: reward 1 when the reply has an even length (so groups are rarely constant)."""
    return f'''
import agentcore_rl_harness as arl

@arl.reward
def even_length(rollout, row):
    return float(len(rollout.result["reply"]) % 2 == 0)

@arl.task(dataset="data.jsonl", agent="agent.py", samples={samples}, rewards=[even_length])
def test_toy(rollout, row):
    assert rollout.reward == 1.0
'''


def rows(count: int, *, train: int = 0, **extra: Any) -> list[dict[str, Any]]:
    """`count` rows `r0..`; the first `train` are in the train split, the rest in test."""
    return [
        {"id": f"r{i}", "split": "train" if i < train else "test", "n": i, "question": f"Say {i}", **extra}
        for i in range(count)
    ]


def write_project(root: Path, *, task: str, dataset: Iterable[dict[str, Any]], agent: str = AGENT) -> Path:
    """data.jsonl, agent.py and test_toy.py in `root`; returns `root`."""
    root = Path(root)
    (root / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in dataset))
    (root / "agent.py").write_text(agent)
    (root / "test_toy.py").write_text(task)
    return root


# Comparing two runs that must give the same result. Left out, and why (everything else is equal):
# - run.id: the run directory's name, not content; run.started_at, run.wall_time_s: wall clock.
# - elapsed_s, mean_elapsed_s (overall, per task, per tag): sums of rollout wall times; agents
#   sleep and the machine is shared, so these are timings, not results.
# Rollout records are compared the same way, without session_id (a fresh random key per session),
# run_id (the directory name) and elapsed_s (wall time); sampled token ids must be identical, and
# logprobs equal to 1e-4: they differ by ~1e-6 between any two runs (measured max 9.5e-7) because
# the sampler's fp32 forward passes batch whichever rows are in flight together, and the reduction
# order (batch shape, left padding, prefix-cache hits) is timing-dependent. The seeded per-row
# generators keep the drawn tokens identical, so the report is identical.
REPORT_TIMING = {"elapsed_s", "mean_elapsed_s"}
RUN_TIMING = {"id", "started_at", "wall_time_s"}
RECORD_VOLATILE = {"session_id", "run_id", "elapsed_s"}


def _content(value):
    """The report without timing and ids (see above)."""
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k not in REPORT_TIMING}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


def report_content(run_dir):
    """report.json without what differs between equal runs (see REPORT_TIMING, RUN_TIMING)."""
    report = json.loads((Path(run_dir) / "report.json").read_text())
    report["run"] = {k: v for k, v in report["run"].items() if k not in RUN_TIMING}
    return _content(report)


def records_by_key(records, *, tolerant=False):
    """Records by (task, row, sample), without volatile fields; `tolerant`: logprobs to 1e-4."""
    found = {}
    for record in records:
        content = {k: v for k, v in record.items() if k not in RECORD_VOLATILE}
        if tolerant:
            content["traces"] = [
                {**trace, "logprobs": [None if lp is None else pytest.approx(lp, abs=1e-4)
                                       for lp in trace["logprobs"]]}
                for trace in record["traces"]
            ]
        found[(record["task"], record["row_id"], record["sample_index"])] = content
    return found


def read_records(run_dir):
    """Every line of a run's rollouts.jsonl, parsed."""
    return [json.loads(line) for line in (Path(run_dir) / "rollouts.jsonl").read_text().splitlines()]


def kill_group(process):
    """SIGKILL what a pytest subprocess left behind (its agent processes), by its process group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
