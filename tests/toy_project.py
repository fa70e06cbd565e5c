"""A toy task project on disk for end-to-end tests: one agent that asks the gateway one question
(the real `openai` SDK) and a task file, plus its dataset. Imported by tests in any folder
(tests/ is on sys.path through its conftest).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
