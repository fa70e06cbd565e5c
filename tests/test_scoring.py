"""Scoring one episode: rewards must be finite numbers; task-code errors fail the task."""

import math

import numpy as np
import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.errors import RewardError
from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Case, Episode
from agentcore_rl_harness.scoring import RolloutHandle, check_reward, score_offline
from agentcore_rl_harness.tasks import task_spec


def _call(function, *args, **kwargs):
    return function(*args, **kwargs)


def _case(tmp_path, body, rewards=()):
    spec = task_spec(arl.task(dataset="d.jsonl", rewards=rewards)(body))
    return Case(spec=spec, row={"id": "r1", "n": 2}, sample_index=0, phase="eval")


def _handle(case, result=None):
    episode = Episode(case=case, session_id="arl-x", turns=1, usage=Usage(), traces=(),
                      outcome=SessionOutcome(Status.COMPLETED, result or {"answer": 2}, None, 0.1))
    return RolloutHandle(episode)


@pytest.mark.parametrize("value", [1, 0.5, -3, np.float32(0.25), np.int64(2)])
def test_finite_numbers_are_rewards(value):
    assert check_reward("r", value) == float(value)


@pytest.mark.parametrize("value,said", [
    (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (np.float64("nan"), "nan"),
    ("1.0", "'1.0' (str)"), (None, "None"), (True, "True (bool)"), ([1.0], "[1.0] (list)"),
])
def test_non_finite_or_non_numeric_rewards_are_errors_naming_reward_and_value(value, said):
    with pytest.raises(RewardError) as excinfo:
        check_reward("judge", value)
    assert f"reward judge is {said}" in str(excinfo.value)


def test_a_nan_reward_function_fails_the_task_and_is_not_recorded(tmp_path):
    @arl.reward
    def good(rollout, row):
        return 1.0

    @arl.reward
    def judge(rollout, row):
        return float("nan")

    def test_t(rollout, row):
        pass

    case = _case(tmp_path, test_t, rewards=[good, judge])
    handle = _handle(case)
    verdict = score_offline(case, handle, _call, {})
    assert verdict.status is Status.TASK_FAILED and verdict.success is False
    assert "reward judge is nan" in verdict.error
    assert handle.rewards == {"good": 1.0} and handle.reward is None


def test_a_body_that_sets_a_bad_reward_fails_the_task(tmp_path):
    def test_t(rollout, row):
        rollout.reward = math.inf
        rollout.rewards["style"] = "great"

    case = _case(tmp_path, test_t)
    handle = _handle(case)
    verdict = score_offline(case, handle, _call, {})
    assert verdict.status is Status.TASK_FAILED
    assert "reward rollout.reward is inf" in verdict.error
    assert "reward style is 'great' (str)" in verdict.error
    assert handle.reward is None and handle.rewards == {}


def test_a_bug_in_the_body_is_a_task_failure_with_its_traceback(tmp_path):
    def test_t(rollout, row):
        return rollout.result["missing_key"]

    case = _case(tmp_path, test_t)
    verdict = score_offline(case, _handle(case), _call, {})
    assert verdict.status is Status.TASK_FAILED
    assert verdict.error.startswith("KeyError: 'missing_key'")
    assert "Traceback (most recent call last)" in verdict.error
    assert 'rollout.result["missing_key"]' in verdict.error  # the failing line of task code


def test_an_assertion_is_the_verdict_without_a_traceback(tmp_path):
    def test_t(rollout, row):
        assert False, "wrong answer"

    case = _case(tmp_path, test_t)
    verdict = score_offline(case, _handle(case), _call, {})
    assert verdict.error.startswith("AssertionError: wrong answer")
    assert "Traceback" not in verdict.error
