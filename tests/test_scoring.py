"""Scoring one episode: rewards must be finite numbers; task-code errors fail the task."""

import math

import numpy as np
import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.errors import RewardError
from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Case, Episode
from agentcore_rl_harness.run.scoring import RolloutHandle, check_reward, score_offline
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


def test_a_bug_in_the_body_is_a_task_error_with_only_the_users_traceback(tmp_path):
    def test_t(rollout, row):
        return rollout.result["missing_key"]

    case = _case(tmp_path, test_t)
    verdict = score_offline(case, _handle(case), _call, {})
    assert verdict.status is Status.TASK_ERROR and verdict.success is None  # a bug, not a verdict
    assert verdict.error.startswith("KeyError: 'missing_key'")
    assert "Traceback (most recent call last)" in verdict.error
    assert 'rollout.result["missing_key"]' in verdict.error  # the failing line of task code
    assert "agentcore_rl_harness" not in verdict.error  # the harness's frames are not the user's


def test_a_bug_in_a_reward_function_is_a_task_error(tmp_path):
    @arl.reward
    def broken(rollout, row):
        return 1 / 0

    def test_t(rollout, row):
        assert True

    case = _case(tmp_path, test_t, rewards=[broken])
    verdict = score_offline(case, _handle(case), _call, {})
    assert verdict.status is Status.TASK_ERROR
    assert verdict.error.startswith("ZeroDivisionError") and "return 1 / 0" in verdict.error


def test_an_assertion_is_the_verdict_without_a_traceback(tmp_path):
    def test_t(rollout, row):
        assert False, "wrong answer"

    case = _case(tmp_path, test_t)
    verdict = score_offline(case, _handle(case), _call, {})
    assert verdict.error.startswith("AssertionError: wrong answer")
    assert "Traceback" not in verdict.error


# -- the agent's own reward ------------------------------------------------------------------------


def _agent_task(tmp_path, *, reward_from_agent, rewards=()):
    def test_t(rollout, row):
        pass

    spec = task_spec(arl.task(dataset="d.jsonl", rewards=rewards,
                              reward_from_agent=reward_from_agent)(test_t))
    return Case(spec=spec, row={"id": "r1", "n": 2}, sample_index=0, phase="eval")


@pytest.mark.parametrize("result,reward,rewards", [
    ({"reward": 0.5}, 0.5, {"agent": 0.5}),
    ({"rewards": [1.0]}, 1.0, {"agent": 1.0}),  # ART's usual shape
    ({"rewards": [1.0, 0.5]}, 1.5, {"agent": 1.5, "agent[0]": 1.0, "agent[1]": 0.5}),
    ({"rewards": {"exact": 1.0, "style": 0.25}}, 1.25,
     {"agent": 1.25, "agent.exact": 1.0, "agent.style": 0.25}),
    ({"rewards": 2}, 2.0, {"agent": 2.0}),
    ({"reward": 0.0, "rewards": [1.0]}, 0.0, {"agent": 0.0}),  # `reward` is the total
])
def test_reward_from_agent_is_the_rollouts_reward(tmp_path, result, reward, rewards):
    case = _agent_task(tmp_path, reward_from_agent=True)
    handle = _handle(case, result)
    verdict = score_offline(case, handle, _call, {})
    assert verdict.status is Status.COMPLETED, verdict.error
    assert handle.reward == reward and handle.rewards == rewards


@pytest.mark.parametrize("result,said", [
    ({"answer": 1}, "the agent's result has no `reward` or `rewards` (its keys: ['answer'])"),
    ({"reward": float("nan")}, "reward agent reward is nan"),
    ({"rewards": [1.0, "x"]}, "reward agent rewards[1] is 'x' (str)"),
])
def test_reward_from_agent_missing_or_bad_fails_the_task(tmp_path, result, said):
    case = _agent_task(tmp_path, reward_from_agent=True)
    handle = _handle(case, result)
    verdict = score_offline(case, handle, _call, {})
    assert verdict.status is Status.TASK_FAILED and said in verdict.error
    assert handle.reward is None


def test_the_agents_reward_is_recorded_when_the_task_computes_its_own(tmp_path):
    @arl.reward
    def exact(rollout, row):
        return 0.0

    case = _agent_task(tmp_path, reward_from_agent=False, rewards=[exact])
    handle = _handle(case, {"rewards": [1.0]})
    assert score_offline(case, handle, _call, {}).status is Status.COMPLETED
    assert handle.reward == 0.0  # the task's judgement, not the agent's
    assert handle.rewards == {"exact": 0.0, "agent": 1.0}


def test_a_bad_self_score_does_not_fail_a_task_that_computes_its_own(tmp_path):
    case = _agent_task(tmp_path, reward_from_agent=False)
    handle = _handle(case, {"rewards": "great"})
    assert score_offline(case, handle, _call, {}).status is Status.COMPLETED
    assert handle.rewards == {} and handle.result == {"rewards": "great"}


def test_reward_from_agent_with_reward_functions_or_a_reserved_name_is_refused():
    with pytest.raises(ValueError, match="choose one source of the reward"):
        arl.task(dataset="d.jsonl", reward_from_agent=True, rewards=[lambda rollout, row: 1.0])
    with pytest.raises(ValueError, match="'agent' is reserved"):
        arl.task(dataset="d.jsonl", rewards=[arl.reward(name="agent")(lambda rollout, row: 1.0)])
