"""`pytest_outcomes.py`: the run's verdicts as pytest's (exit codes, failures, user_properties)."""

import pytest

from agentcore_rl_harness.pytest_outcomes import exit_code, rollout_properties
from agentcore_rl_harness.records import Rollout, Status, Usage

OK, FAILED, INTERRUPTED = pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED


@pytest.mark.parametrize("status,run_failed,expected", [
    (FAILED, False, OK),  # failed tasks are data
    (OK, True, FAILED),  # an infrastructure error or a gate fails a green run
    (FAILED, True, FAILED),
    (OK, False, OK),
    (INTERRUPTED, False, INTERRUPTED),  # pytest's own trouble is kept
])
def test_exit_code(status, run_failed, expected):
    assert exit_code(status, run_failed=run_failed) == expected


def test_a_rollout_becomes_user_properties():
    rollout = Rollout(run_id="x", task="t", row_id="r", sample_index=0, group_id="g", phase="eval", step=None,
                      session_id="arl-1", status=Status.TASK_FAILED, error="no", reward=0.5,
                      rewards={"judge": 0.5}, success=False, result={}, turns=1, usage=Usage(), elapsed_s=0.0,
                      traces=())
    assert rollout_properties(rollout) == [
        ("reward", "0.5"), ("status", "task_failed"), ("session_id", "arl-1"), ("rewards.judge", "0.5")]


def test_failure_line_is_one_line_with_status_rewards_and_why():
    from agentcore_rl_harness.pytest_outcomes import failure_line

    rollout = Rollout(
        run_id="r", task="t", row_id="r0", sample_index=0, group_id="g", phase="eval",
        step=None, session_id="s", status=Status.TASK_FAILED, error="AssertionError: expected 3, got 4\nassert 0.5 == 1.0",
        reward=0.5, rewards={"correct": 0.0, "used_tool": 1.0}, success=False, result={}, turns=1,
        usage=Usage(1, 1), elapsed_s=1.0, traces=(),
    )
    assert failure_line("t.py::t[r0-s0]", rollout) == (
        "t.py::t[r0-s0] task_failed reward 0.5 (correct 0, used_tool 1): AssertionError: expected 3, got 4")


TASK = '''
import agentcore_rl_harness as arl

@arl.reward
def answered(rollout, row):
    return float("answer" in rollout.result)

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2, rewards=[answered])
def test_toy(rollout, row):
    assert rollout.reward == 1.0, f"no answer for {row['id']}"


def test_plain():
    assert 1 + 1 == 3
'''


@pytest.mark.slow
def test_failed_rollouts_print_one_line_each_and_pytest_v_the_full_blocks(pytester, tiny_model_dir):
    import json

    (pytester.path / "data.jsonl").write_text("\n".join(
        json.dumps({"id": f"r{i}", "split": "test"}) for i in range(2)) + "\n")
    (pytester.path / "agent.py").write_text("")  # agent=null runs instead
    (pytester.path / "test_toy.py").write_text(TASK)
    args = ["--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=null",
            "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*args, timeout=300)
    output = result.stdout.str()
    assert "agentcore-rl: 4 failed rollouts (pytest -v for each" in output, output[-3000:]
    for name in ("r0-s0", "r0-s1", "r1-s0", "r1-s1"):
        assert f"test_toy.py::test_toy[{name}] task_failed reward 0 (answered 0): AssertionError: no answer" in output
    assert "_ test_toy[" not in output and "no answer for r0\nassert" not in output  # no pytest block
    assert "_ test_plain _" in output and "assert (1 + 1) == 3" in output  # ordinary tests keep theirs
    assert "FAILED test_toy.py::test_plain" in output and "FAILED test_toy.py::test_toy[" not in output
    assert "5 failed" in output  # pytest's final count still counts the rollouts
    verbose = pytester.runpytest_subprocess(*args, "-v", timeout=300).stdout.str()
    assert "failed rollouts (pytest -v" not in verbose and "_ test_toy[r0-s0] _" in verbose
