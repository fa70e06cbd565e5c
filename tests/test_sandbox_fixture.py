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
    result.assert_outcomes(passed=6)
    records = [json.loads(line) for line in (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(r["success"] for r in records)
