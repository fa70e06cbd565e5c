"""Nothing collected is lost to a bad value: NaN / inf / non-numeric rewards, results JSON cannot
hold, bugs in task code and mixed result types, through the real plugin, runtime and tiny model."""

import json

import pytest

pytestmark = pytest.mark.slow

AGENT = '''
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    prompt = "word " * 9000 if payload.get("overflow") else "hi"  # the tiny model has 8192
    reply = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": prompt}], max_tokens=2)
    n = payload["n"]
    if payload.get("nan_result"):
        return {"n": n, "score": float("nan")}
    return {"n": n, "answer": n if n % 2 else str(n), "reply": reply.choices[0].message.content}
'''

NAN_TASK = '''
import agentcore_rl_harness as arl

@arl.reward
def judge(rollout, row):
    return [float("nan"), float("inf"), "high", 1.0][row["n"] % 4]

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2, rewards=[judge])
def test_judged(rollout, row):
    assert rollout.result["n"] == row["n"]
'''

BUGGY_TASK = '''
import agentcore_rl_harness as arl

def payload(row):
    if row["n"] == 1:
        raise ValueError("payload bug on purpose")
    return row

@arl.task(dataset="data.jsonl", agent="agent.py", payload=payload)
def test_buggy(rollout, row):
    if row["n"] == 2:
        rollout.result["no_such_key"]
    assert rollout.result["n"] == row["n"]
'''


def _project(pytester, task, rows):
    pytester.path.joinpath("data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pytester.path.joinpath("agent.py").write_text(AGENT)
    pytester.makepyfile(test_task=task)


def _run(pytester, mode, *extra):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", mode, "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set",
        "sampling.max_tokens=2", "--agentcore-rl-out", "run", *extra, timeout=600,
    )


def _records(pytester):
    lines = (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_nan_inf_and_non_numeric_rewards_fail_their_rollouts_and_all_16_are_written(
    pytester, tiny_model_dir
):
    rows = [{"id": f"q{n}", "split": "test", "n": n, "nan_result": n == 7} for n in range(8)]
    _project(pytester, NAN_TASK, rows)
    result = _run(pytester, "eval")
    output = result.stdout.str()
    assert "INTERNALERROR" not in output, output[-3000:]
    assert result.ret == 0, output[-3000:]  # task failures are not infrastructure errors
    result.assert_outcomes(passed=2, failed=14)
    records = _records(pytester)
    assert len(records) == 16
    said = {0: "reward judge is nan", 1: "reward judge is inf", 2: "reward judge is 'high' (str)"}
    for record in records:
        n = int(record["row_id"][1:])
        assert record["traces"] and record["traces"][0]["loss_mask"], "sampled tokens kept"
        if n == 7:
            assert record["status"] == "task_failed"
            assert "result.score = nan" in record["error"]
            assert record["result"] == {"n": 7, "score": "nan"}
        elif n % 4 == 3:
            assert record["status"] == "completed" and record["reward"] == 1.0
        else:
            assert record["status"] == "task_failed", record
            assert said[n % 4] in record["error"]
            assert record["reward"] is None and record["rewards"] == {}
    report = json.loads((pytester.path / "run" / "report.json").read_text())
    assert report["overall"]["failures"] == {"task_failed": 14}
    assert report["overall"]["success_rate"]["n"] == 16


def test_task_code_bugs_are_task_errors_context_overflow_is_the_agents_and_parquet_holds_mixed_results(
    pytester, tiny_model_dir
):
    rows = [{"id": f"q{n}", "split": "train", "n": n, "overflow": n == 4} for n in range(5)]
    _project(pytester, BUGGY_TASK, rows)
    result = _run(pytester, "collect")
    output = result.stdout.str()
    assert result.ret == 0, output[-3000:]  # no infrastructure error among them
    result.assert_outcomes(passed=2, failed=3)
    by_row = {r["row_id"]: r for r in _records(pytester)}
    assert by_row["q1"]["status"] == "task_error" and by_row["q1"]["turns"] == 0
    assert "building the invoke payload failed: ValueError: payload bug on purpose" in by_row["q1"]["error"]
    assert "Traceback (most recent call last)" in by_row["q1"]["error"]
    assert by_row["q2"]["status"] == "task_error"  # a bug in the body, not a wrong answer
    assert by_row["q2"]["error"].startswith("KeyError: 'no_such_key'")
    assert "pluggy" not in by_row["q2"]["error"] and "_pytest" not in by_row["q2"]["error"]
    assert 'rollout.result["no_such_key"]' in by_row["q2"]["error"]  # the traceback's task line
    import datasets

    # a prompt over the model's context: the gateway's 400 made the agent fail, its own fault
    assert by_row["q4"]["status"] == "agent_error", by_row["q4"]
    assert "context_length_exceeded" in by_row["q4"]["error"]
    parquet = datasets.Dataset.from_parquet(str(pytester.path / "run" / "rollouts.parquet"))
    assert len(parquet) == 5
    results = {row["row_id"]: json.loads(row["result"]) for row in parquet}
    assert results["q0"]["answer"] == "0" and results["q3"]["answer"] == 3  # str and int mixed
    assert results["q1"] is None
