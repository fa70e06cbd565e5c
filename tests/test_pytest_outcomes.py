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
