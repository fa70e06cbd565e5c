"""End to end: `pytest --agentcore-rl eval` with the tiny model, the local runtime, real agents."""

import json
import math

import pytest

pytestmark = pytest.mark.slow

AGENT = '''
import os, time
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    behaviour = payload.get("behaviour", "ok")
    if behaviour == "crash":
        os._exit(3)
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "raise":
        raise RuntimeError("agent blew up on purpose")
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    messages = [{"role": "user", "content": payload["question"]}]
    first = client.chat.completions.create(model=rollout["model_id"], messages=messages, max_tokens=8)
    messages.append({"role": "assistant", "content": first.choices[0].message.content})
    messages.append({"role": "user", "content": "Are you sure?"})
    second = client.chat.completions.create(model=rollout["model_id"], messages=messages, max_tokens=8)
    return {"answer": payload["n"], "reply": second.choices[0].message.content}
'''

TASK = '''
import agentcore_rl_harness as arl

@arl.reward
def even(rollout, row):
    return float(row["n"] % 2 == 0)

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2, rewards=[even])
def test_parity(rollout, row):
    assert rollout.result["answer"] == row["n"]
    assert rollout.reward == 1.0, "odd row"
'''


def _project(pytester, rows):
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.path.joinpath("agent.py").write_text(AGENT)
    pytester.makepyfile(test_task=TASK)
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")


def _run(pytester, *extra):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=8", "--agentcore-rl-out", "run", *extra,
        timeout=600,
    )


def _records(pytester):
    lines = (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_eval_writes_run_directory_with_exact_traces(pytester, tiny_model_dir):
    rows = [{"id": f"q{i}", "split": "test", "n": i, "question": f"What is {i}?"} for i in range(3)]
    _project(pytester, rows)
    result = _run(pytester, "--junitxml", "user.xml")
    assert result.ret == 0, result.stdout.str()[-3000:]  # task failures do not fail the process
    result.assert_outcomes(passed=5, failed=2)  # q0, q2 x2 + plain pass; q1 x2 fail
    run = pytester.path / "run"
    for name in ("config.yaml", "rollouts.jsonl", "report.json", "report.md", "junit.xml"):
        assert (run / name).is_file(), name
    records = _records(pytester)
    assert sorted((r["row_id"], r["sample_index"]) for r in records) == [
        (f"q{i}", s) for i in range(3) for s in range(2)
    ]
    for record in records:
        assert record["status"] == ("task_failed" if record["row_id"] == "q1" else "completed")
        assert record["success"] is (record["row_id"] != "q1")
        assert record["rewards"] == {"even": float(record["row_id"] != "q1")}
        assert record["turns"] == 2
        assert len(record["session_id"]) >= 33
        # a clean two-turn history is ONE training row
        assert len(record["traces"]) == 1
        trace = record["traces"][0]
        n = len(trace["token_ids"]) - trace["prompt_length"]
        assert len(trace["loss_mask"]) == len(trace["logprobs"]) == n
        assert all((lp is not None) == bool(m) for m, lp in zip(trace["loss_mask"], trace["logprobs"]))
        assert 2 <= sum(trace["loss_mask"]) <= 16  # two replies of at most 8 tokens each
        assert trace["loss_mask"][0] == 1 and 0 in trace["loss_mask"]  # tokens between turns
        assert record["usage"]["completion_tokens"] == sum(trace["loss_mask"])
    _check_logprobs_recompute(tiny_model_dir, records)
    report = json.loads((run / "report.json").read_text())
    assert report["overall"]["success_rate"]["n"] == 6
    assert report["overall"]["success_rate"]["value"] == pytest.approx(4 / 6)
    assert report["tasks"]["test_parity"]["pass_at_k"]["2"] == pytest.approx(2 / 3)
    assert "66.7% success" in (run / "report.md").read_text()
    junit = (run / "junit.xml").read_text()
    assert junit.count("<testcase") == 6 and junit.count("<failure") == 2
    result.stdout.fnmatch_lines(["*agentcore-rl eval: 66.7% success*"])
    _check_user_junitxml(pytester.path / "user.xml", records)


def _check_user_junitxml(path, records):
    """The task items carry their rollout's reward, status, session and rewards as user
    properties into the user's own --junitxml; an ordinary test carries none."""
    import xml.etree.ElementTree as ET

    records = {f"test_parity[{r['row_id']}-s{r['sample_index']}]": r for r in records}
    cases = {case.get("name"): case for case in ET.parse(path).iter("testcase")}
    assert set(records) < set(cases) and "test_plain" in cases
    for name, record in records.items():
        properties = {p.get("name"): p.get("value") for p in cases[name].iter("property")}
        assert properties == {
            "reward": repr(record["reward"]), "status": record["status"],
            "session_id": record["session_id"], "rewards.even": repr(record["rewards"]["even"]),
        }
    assert cases["test_parity[q1-s0]"].find("failure") is not None  # the failed task, with its data
    assert not list(cases["test_plain"].iter("property"))


def _check_logprobs_recompute(model_dir, records):
    """A forward pass of the policy over each trace reproduces the recorded logprobs."""
    import torch

    from agentcore_rl_harness.models import load_model

    model = load_model(model_dir)
    for record in records:
        trace = record["traces"][0]
        ids = torch.tensor([trace["token_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        logprobs = torch.log_softmax(logits / 1.0, dim=-1)
        start = trace["prompt_length"]
        for offset, (mask, recorded) in enumerate(zip(trace["loss_mask"], trace["logprobs"])):
            if not mask:
                continue
            position = start + offset
            expected = logprobs[position - 1, trace["token_ids"][position]].item()
            assert math.isclose(recorded, expected, abs_tol=2e-3), (position, recorded, expected)


def test_agent_failures_are_rollout_statuses_and_the_run_goes_on(pytester, tiny_model_dir):
    rows = [
        {"id": "ok", "split": "test", "n": 0, "question": "hi"},
        {"id": "crash", "split": "test", "n": 0, "behaviour": "crash"},
        {"id": "hang", "split": "test", "n": 0, "behaviour": "hang"},
        {"id": "raise", "split": "test", "n": 0, "behaviour": "raise"},
    ]
    _project(pytester, rows)
    result = _run(pytester, "--agentcore-rl-set", "eval.samples=1",
                  "--agentcore-rl-set", "eval.timeout_s=25")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=2, failed=3)
    by_row = {r["row_id"]: r for r in _records(pytester)}
    assert by_row["ok"]["status"] == "completed"
    assert by_row["crash"]["status"] == "agent_error" and "exit" in by_row["crash"]["error"]
    assert by_row["hang"]["status"] == "timeout"
    assert by_row["raise"]["status"] == "agent_error"
    assert "agent blew up on purpose" in by_row["raise"]["error"]
    report = json.loads((pytester.path / "run" / "report.json").read_text())
    assert report["overall"]["failures"] == {"agent_error": 2, "timeout": 1}
    result.stdout.fnmatch_lines(["*agent_error*"])


def test_bad_payload_fails_the_rollout_not_the_run(pytester, tiny_model_dir):
    rows = [{"id": "a", "split": "test", "n": 0, "question": "x", "_rollout": "reserved"}]
    _project(pytester, rows)
    result = _run(pytester, "--agentcore-rl-set", "eval.samples=1")
    record = _records(pytester)[0]
    assert record["status"] == "task_error" and "reserved key" in record["error"]
    assert result.ret == 0  # a bad row is the task's error (task_error), not an infrastructure error


def test_sigterm_stops_sessions_and_keeps_what_finished(pytester, tiny_model_dir):
    import signal
    import subprocess
    import sys
    import time

    rows = [{"id": "ok", "split": "test", "n": 0, "question": "hi"}] + [
        {"id": f"hang{i}", "split": "test", "n": 0, "behaviour": "hang"} for i in range(2)
    ]
    _project(pytester, rows)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
         "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "eval.samples=1",
         "--agentcore-rl-set", "sampling.max_tokens=4", "--agentcore-rl-out", "run"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    rollouts = pytester.path / "run" / "rollouts.jsonl"
    agent = str(pytester.path / "agent.py")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if rollouts.is_file() and rollouts.read_text().count("\n") >= 1:
            break
        time.sleep(0.3)
    time.sleep(1.0)  # the hanging agents are live now
    assert subprocess.run(["pgrep", "-f", agent], capture_output=True).stdout.strip()
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-2000:]
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert [r["row_id"] for r in records] == ["ok"]
    report = json.loads((pytester.path / "run" / "report.json").read_text())
    assert report["overall"]["rollouts"] == 1
    time.sleep(1.0)
    assert not subprocess.run(["pgrep", "-f", agent], capture_output=True).stdout.strip()


def test_gates_fail_the_build_and_baselines_compare(pytester, tiny_model_dir):
    rows = [{"id": f"q{i}", "split": "test", "n": i, "question": f"What is {i}?"} for i in range(3)]
    _project(pytester, rows)
    failed = _run(pytester, "--agentcore-rl-set", "gates.min_success_rate=0.9",
                  "--agentcore-rl-save-baseline", "main")
    assert failed.ret == 1, failed.stdout.str()[-3000:]
    failed.stdout.fnmatch_lines(["*agentcore-rl gate FAILED*0.9*"])
    assert (pytester.path / ".agentcore-rl" / "baselines" / "main.json").is_file()
    # same task, same seeds: no regression against the saved baseline, so the gate passes
    again = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=8", "--agentcore-rl-out", "run2",
        "--agentcore-rl-compare", "main",
        "--agentcore-rl-set", "gates.max_regression={success_rate: -2pp}", timeout=600,
    )
    assert again.ret == 0, again.stdout.str()[-3000:]
    missing = pytester.runpytest_subprocess("--agentcore-rl", "eval", "--agentcore-rl-compare", "nope")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--agentcore-rl-compare 'nope': not a run directory*"])


def test_eval_temperature_zero_decodes_greedily_whatever_the_training_temperature(pytester, tiny_model_dir):
    import torch

    from agentcore_rl_harness.models import load_model

    rows = [{"id": f"q{i}", "split": "test", "n": 2 * i, "question": f"What is {i}?"} for i in range(2)]
    _project(pytester, rows)
    result = _run(pytester, "--agentcore-rl-set", "sampling.temperature=1.5", "--agentcore-rl-set", "eval.temperature=0")
    assert result.ret == 0, result.stdout.str()[-3000:]
    records = _records(pytester)
    model = load_model(tiny_model_dir)
    for record in records:
        trace = record["traces"][0]
        with torch.no_grad():
            logits = model(torch.tensor([trace["token_ids"]])).logits[0]
        start = trace["prompt_length"]
        sampled = [(start + offset, trace["token_ids"][start + offset])
                   for offset, mask in enumerate(trace["loss_mask"]) if mask]
        assert len(sampled) >= 2
        # every token the agent got is the policy's most likely one (T=1.5 on the random tiny model
        # would almost never pick them all)
        assert all(int(logits[position - 1].argmax()) == token for position, token in sampled)
    by_row = {}
    for record in records:
        by_row.setdefault(record["row_id"], []).append(record["traces"][0]["token_ids"])
    assert all(len(ids) == 2 and ids[0] == ids[1] for ids in by_row.values())  # seeds differ, greedy does not
