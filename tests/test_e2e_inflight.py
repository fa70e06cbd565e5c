"""A real `pytest --agentcore-rl eval` (tiny model, local runtime): inflight.json lists the
rollouts running while the run goes, with their session ids, and is gone when it ends."""

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

AGENT = '''
import os, time
from pathlib import Path
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    reply = client.chat.completions.create(model=rollout["model_id"], max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 60  # the test lets the held rows finish by creating the file
    while payload.get("hold") and not Path(payload["hold"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"answer": payload["n"], "reply": reply.choices[0].message.content}
'''

TASK = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py")
def test_held(rollout, row):
    assert rollout.result["answer"] == row["n"]
'''


def test_inflight_json_lists_running_rollouts_and_is_gone_at_the_end(tmp_path, tiny_model_dir):
    go = tmp_path / "go"
    rows = [{"id": "quick", "split": "test", "n": 0}] + [
        {"id": f"held{i}", "split": "test", "n": i, "hold": str(go)} for i in (1, 2)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "test_held.py").write_text(TASK)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
         "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "eval.samples=2",
         "--agentcore-rl-set", "sampling.max_tokens=4", "--agentcore-rl-out", "run"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    inflight, seen = tmp_path / "run" / "inflight.json", None
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            if inflight.is_file():
                cases = json.loads(inflight.read_text())["cases"]  # replaced whole: never torn
                running = [case for case in cases if case["state"] == "running"]
                if len(running) == 4 and len(cases) == 4:  # both quick rollouts have finished
                    seen = cases
                    break
            time.sleep(0.1)
        go.touch()
        output, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert seen is not None, f"inflight.json never listed the 4 held rollouts running:\n{output[-3000:]}"
    assert sorted((case["row_id"], case["sample_index"]) for case in seen) == [
        ("held1", 0), ("held1", 1), ("held2", 0), ("held2", 1)]
    assert {(case["task"], case["phase"], case["step"]) for case in seen} == {("test_held", "eval", None)}
    assert all(case["session_id"].startswith("arl-") and case["started_at"] <= time.time() for case in seen)
    assert process.returncode == 0, output[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["session_id"] for r in records if r["row_id"] != "quick"} == {c["session_id"] for c in seen}
    assert not inflight.exists() and (tmp_path / "run" / "report.json").is_file()
    assert sorted(path.name for path in (tmp_path / "run").glob("*inflight*")) == []
