"""The `sandbox` fixture through pytester: a task test inspects the final files of the session
its agent ran in (kept by the local runtime, opened again in an isolated sandbox)."""

import json

import pytest

pytestmark = pytest.mark.slow

AGENT = '''
import os
import subprocess

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    os.makedirs("out", exist_ok=True)
    with open("out/answer.txt", "w") as answer:
        answer.write(str(payload["n"] * 2))
    subprocess.run(["sh", "-c", "echo built > out/log.txt"], check=True)
    return {"wrote": "out/answer.txt"}
'''

TASKS = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py")
def test_files_left_behind(rollout, row, sandbox):
    assert rollout.status.value == "completed"
    assert sandbox.sync.get_file("out/answer.txt") == str(row["n"] * 2).encode()
    listing = sandbox.sync.exec(["ls", "out"])
    assert listing.ok and listing.stdout.split() == ["answer.txt", "log.txt"]
    assert sandbox.sync.exec(["id", "-u"]).stdout.strip() == "1000"  # isolated like the session


@arl.task(dataset="data.jsonl", agent="agent.py", name="test_async_sandbox")
async def test_async(rollout, sandbox):
    result = await sandbox.exec(["cat", "out/log.txt"])
    assert result.stdout == "built\\n"


@arl.task(dataset="data.jsonl", agent="agent.py", name="test_no_sandbox_asked")
def test_plain(rollout):
    assert rollout.episode.sandbox is None  # no final files kept when the task does not ask


@arl.reward
def answer_file(rollout, row):
    return float(rollout.sandbox.sync.get_file("out/answer.txt") == str(row["n"] * 2).encode())


@arl.task(dataset="data.jsonl", agent="agent.py", name="test_reward_reads_files",
          rewards=[answer_file], sandbox=True)
def test_reward(rollout):
    assert rollout.rewards["answer_file"] == 1.0 and rollout.reward == 1.0


@arl.task(dataset="data.jsonl", agent="agent.py", name="test_reward_without_sandbox",
          rewards=[answer_file])
def test_forgot(rollout):
    pass
'''


def test_a_task_inspects_the_sessions_final_files(pytester, tiny_model_dir):
    rows = [{"id": f"q{i}", "split": "test", "n": i} for i in range(2)]
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.path.joinpath("agent.py").write_text(AGENT)
    pytester.makepyfile(test_tasks=TASKS)
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-out", "run", timeout=600,
    )
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.assert_outcomes(passed=8, failed=2)
    records = [json.loads(line) for line in (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()]
    forgot = [r for r in records if r["task"] == "test_reward_without_sandbox"]
    assert len(records) == 10 and all(r["success"] for r in records if r not in forgot)
    assert [r["rewards"]["answer_file"] for r in records if r["task"] == "test_reward_reads_files"] == [1.0, 1.0]
    assert len(forgot) == 2 and not any(r["success"] for r in forgot)
    assert all("@arl.task(..., sandbox=True)" in r["error"] for r in forgot)
