"""The sanity agents (`--agentcore-rl-set agent=oracle|null`) on the bundled arithmetic task, through
pytester: real agent sessions on the local runtime, scored and reported like any run."""

import json
import shutil
from pathlib import Path

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bundled(pytester):
    for name in ("tasks", "agents", "configs"):
        shutil.copytree(REPO / name, pytester.path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return pytester


def _eval(pytester, *args, out="run"):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-out", out,
        *args, timeout=600,
    )


def _outcome(pytester, out="run"):
    report = json.loads((pytester.path / out / "report.json").read_text())
    records = [json.loads(line) for line in (pytester.path / out / "rollouts.jsonl").read_text().splitlines()]
    return report, records


ONE_SAMPLE = ("--agentcore-rl-set", "eval.samples=1")


@pytest.mark.slow
def test_oracle_reaches_every_reward_and_null_none(bundled, tiny_model_dir):
    rows = {row["id"]: row for row in map(json.loads, (bundled.path / "tasks/data/arith.jsonl").read_text().splitlines())}
    # every one of the 32 test rows of configs/eval/bundled.yaml, once (its 2 samples would play
    # the same script twice)
    result = _eval(bundled, "tasks", "--agentcore-rl-set", "agent=oracle", *ONE_SAMPLE, out="oracle")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=32)
    report, records = _outcome(bundled, "oracle")
    assert report["overall"]["success_rate"]["value"] == 1.0 and report["overall"]["success_rate"]["n"] == 32
    assert {r["row_id"] for r in records} == {row["id"] for row in rows.values() if row["split"] == "test"}
    assert all(r["rewards"] == {"correct": 1.0} and r["status"] == "completed" for r in records)
    # The arithmetic oracle has a `_script`: the real calculator agent ran, teacher-forced.
    for record in records:
        assert record["result"]["answer"] == rows[record["row_id"]]["answer"]
        assert record["result"]["tool_calls"] == 1 and record["turns"] == 2
        (trace,) = record["traces"]
        assert trace["metadata"]["teacher_forced"] and trace["metadata"]["drift_events"] == 0
    result.stdout.fnmatch_lines(["*agentcore-rl eval: 100.0% success*"])

    result = _eval(bundled, "tasks", "--agentcore-rl-set", "agent=null", *ONE_SAMPLE, out="null")
    assert result.ret == 0, result.stdout.str()[-3000:]  # failed tasks do not fail the process
    result.assert_outcomes(failed=32)
    report, records = _outcome(bundled, "null")
    assert report["overall"]["success_rate"]["value"] == 0.0
    assert report["tasks"]["test_arith"]["mean_reward"]["value"] == 0.0
    for record in records:
        assert record["status"] == "task_failed" and record["result"] == {}
        assert record["rewards"] == {"correct": 0.0}
        assert record["turns"] == 0 and record["usage"]["completion_tokens"] == 0 and record["traces"] == []


TASK_WITHOUT_ORACLE = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="missing_agent.py")
def test_no_oracle(rollout, row):
    assert rollout.result.get("answer") == row["answer"]
'''

STAND_IN = '''
from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    return {"answer": payload["answer"]}
'''


@pytest.fixture
def no_oracle(pytester):
    rows = [{"id": f"r{i}", "split": "test", "answer": i} for i in range(2)]
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.path.joinpath("stand_in.py").write_text(STAND_IN)
    pytester.makepyfile(test_task=TASK_WITHOUT_ORACLE)
    return pytester


def test_oracle_on_a_task_without_one_is_a_clear_error(no_oracle):
    result = _eval(no_oracle, "--agentcore-rl-set", "agent=oracle")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*task test_no_oracle declares no oracle, so agent=oracle cannot run it; declare where the "
        "row's reference solution is: @arl.task(..., oracle=\"answer\")*",
    ])
    assert "Traceback" not in result.stdout.str() and not (no_oracle.path / "run" / "rollouts.jsonl").exists()


@pytest.mark.slow
def test_agent_can_name_a_file_that_stands_in_for_the_tasks_agent(no_oracle, tiny_model_dir):
    result = _eval(no_oracle, "--agentcore-rl-set", "agent=stand_in.py")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=2)


def test_the_agent_key_is_validated():
    assert compose_config(["model=tiny"]).typed.agent == "task"
    assert compose_config(["model=tiny", "agent=null"]).typed.agent == "null"  # Hydra's null is the null agent
    assert compose_config(["model=tiny", "agent=pkg.agents:app"]).typed.agent == "pkg.agents:app"
    with pytest.raises(ConfigError, match=r"agent='bogus' is not supported; valid choices: \['task', 'oracle', 'null', 'spam'\]"):
        compose_config(["model=tiny", "agent=bogus"])
    with pytest.raises(ConfigError, match="runtime=agentcore cannot do"):
        compose_config(["model=tiny", "agent=oracle", "runtime=agentcore"])


def test_a_bad_agent_is_a_usage_error(no_oracle):
    result = no_oracle.runpytest_subprocess("--agentcore-rl", "eval", "--agentcore-rl-set", "agent=orcale")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "agent='orcale' is not supported; valid choices: ['task', 'oracle', 'null', 'spam']" in result.stderr.str()


def test_the_spam_agent_fills_its_directory_with_junk_and_claims_success(tmp_path, monkeypatch):
    from agentcore_rl_harness.sanity_agents import AGENTS, spam

    assert AGENTS["spam"] == "agentcore_rl_harness.sanity_agents.spam:app"
    monkeypatch.chdir(tmp_path)
    payload = {"task": "Email the agenda", "files": {"docs/agenda.md": "- goals", "../escape.txt": "x"},
               "_rollout": {"api_key": "secret-key"}}
    result = spam.invoke(payload)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 20 and {p.suffix for p in written} >= {".eml", ".ics", ".csv", ".md", ".json"}
    assert (tmp_path / "docs" / "agenda.md").read_bytes().startswith(b"\x00junk")  # a payload path, junk inside
    assert not (tmp_path.parent / "escape.txt").exists()  # never outside its directory
    stuffed = (tmp_path / "answer.txt").read_text()
    assert "Email the agenda" in stuffed and "- goals" in stuffed and "secret-key" not in stuffed
    assert result["success"] is True and result["reward"] == 1.0 and "Email the agenda" in result["answer"]
