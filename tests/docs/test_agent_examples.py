"""The complete agents of docs/agents.md (OpenAI SDK, LangGraph, Strands) run as printed, against
the real gateway: under agent=oracle the gateway plays the tutorial task's reference episode
through each (two tool calls, then the answer) and every task scores 100%; with the `tiny`
model's own replies each ends as a scored rollout, not an agent_error. The README's "your own
agent" example (its agent and task) runs in the same sessions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, blocks, files

pytestmark = pytest.mark.slow

FRAMEWORKS = ("openai", "langgraph", "strands")


@pytest.fixture
def project(tmp_path):
    """The tutorial's data, config and task file, with one task per framework's agent."""
    tutorial, agents = files(DOCS / "tutorial.md"), files(DOCS / "agents.md")
    assert sorted(agents) == sorted(f"{name}_agent.py" for name in FRAMEWORKS)
    for path in ("data/shop.jsonl", "configs/config.yaml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(tutorial[path])
    for name in FRAMEWORKS:
        (tmp_path / f"{name}_agent.py").write_text(agents[f"{name}_agent.py"])
        task = tutorial["test_shop.py"].replace('agent="agent.py"', f'agent="{name}_agent.py"')
        (tmp_path / f"test_shop_{name}.py").write_text(task.replace("def test_shop(", f"def test_shop_{name}("))
    readme = {b.text.split("\n", 1)[0].removeprefix("# "): b.text
              for b in blocks(DOCS.parent / "README.md") if b.lang == "python"}
    assert sorted(readme) == ["agent.py", "test_qa.py"]
    for name, text in readme.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "data" / "qa.jsonl").write_text(
        json.dumps({"id": "qa-0", "split": "test", "question": "What is the capital of France?", "answer": "Paris"}) + "\n")
    return tmp_path


def _eval(project: Path, out: str, *overrides: str) -> list[dict]:
    args = [arg for override in ("eval.max_rows=1", "eval.samples=1", "report.progress=off", *overrides)
            for arg in ("--agentcore-rl-set", override)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--agentcore-rl",
                           "eval", *args, "--agentcore-rl-out", out], cwd=project, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    return [json.loads(line) for line in (project / out / "rollouts.jsonl").read_text().splitlines()]


def test_each_framework_agent_plays_the_reference_episode_and_survives_a_random_model(project, tiny_model_dir):
    oracle = _eval(project, "oracle", "agent=oracle", "gates.min_success_rate=1.0")
    assert sorted(r["task"] for r in oracle) == sorted(["test_qa", *(f"test_shop_{name}" for name in FRAMEWORKS)])
    for record in (r for r in oracle if r["task"] != "test_qa"):
        assert record["status"] == "completed" and record["reward"] == pytest.approx(1.2), record
        assert record["result"]["tools"] == ["price", "multiply"], record["result"]
        assert record["turns"] == 3  # three model calls through the framework's client

    sampled = _eval(project, "tiny")
    assert len(sampled) == 4
    for record in sampled:
        assert record["status"] in ("completed", "task_failed"), (record["task"], record["status"], record["error"])
        assert record["traces"] and record["turns"] >= 1
