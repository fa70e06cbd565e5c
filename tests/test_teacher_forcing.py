"""agent=oracle with a `_script` oracle runs the task's own agent, teacher-forced through the
gateway: an end-state task through pytester (real local sessions, real tools, real sandbox)."""

import json

import pytest

import notes_project

pytestmark = pytest.mark.slow


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_scripted_oracle_plays_through_the_real_agent_and_reaches_the_end_state(pytester, tiny_model_dir):
    notes_project.write(pytester.path)
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=oracle",
        "--agentcore-rl-out", "oracle", timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=2)
    for record in _records(pytester.path / "oracle" / "rollouts.jsonl"):
        assert record["status"] == "completed" and record["reward"] == 1.0
        assert record["result"] == {"reply": "Done."} and record["turns"] == 2
        (trace,) = record["traces"]
        assert trace["metadata"]["teacher_forced"] and trace["metadata"]["tool_calls"] == 1
        assert sum(trace["loss_mask"]) == record["usage"]["completion_tokens"] > 0


BAD_SCRIPT = notes_project.TASKS.replace('{"content": "Done."},', '{"content": 7},')


def test_a_bad_script_fails_the_task_saying_which_turn(pytester, tiny_model_dir):
    notes_project.write(pytester.path, tasks=BAD_SCRIPT)
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=oracle",
        "--agentcore-rl-out", "bad", timeout=600)
    assert result.ret == 0
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*the task's oracle failed*oracle _script[[]1[]].content must be a string*"])
    assert all(r["status"] == "task_failed" for r in _records(pytester.path / "bad" / "rollouts.jsonl"))
