"""`run/scoring.py`'s `Scorer`: the one scorer of pytest items, harness-scored rollouts and the
external engines' runners; pytest-free (`ItemFailed` is mapped to pytest.fail elsewhere)."""

import pytest
from run_fakes import make_spec, said_four

from agentcore_rl_harness.errors import HarnessError, RewardError
from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Case, Episode
from agentcore_rl_harness.run.scoring import ItemFailed, RolloutHandle, Scorer, Verdict, item_verdict


def _call(function, *args, **kwargs):
    return function(*args, **kwargs)


def _episode(case, status=Status.COMPLETED, result=None, error=None):
    return Episode(case=case, session_id="arl-s", turns=1, usage=Usage(completion_tokens=2), traces=(),
                   outcome=SessionOutcome(status, result, error, 0.25))


@pytest.fixture
def case(tmp_path):
    return Case(spec=make_spec(tmp_path, rewards=[said_four]), row={"id": "r0"}, sample_index=1, phase="train", step=3)


def _scorer(fixtures=None):
    return Scorer(run_id="run-1", call=_call, fixtures=lambda: fixtures or {})


def test_score_runs_rewards_then_the_body_and_gives_the_record(case):
    passed = _scorer().score(case, _episode(case, result={"reply": "4"}))
    assert (passed.status, passed.success, passed.reward, passed.rewards) == (Status.COMPLETED, True, 1.0, {"said_four": 1.0})
    assert (passed.run_id, passed.task, passed.row_id, passed.sample_index, passed.step) == ("run-1", "toy", "r0", 1, 3)
    assert passed.group_id == "toy/r0/train/3" and passed.session_id == "arl-s"
    failed = _scorer().score(case, _episode(case, result={"reply": "5"}))
    assert (failed.status, failed.success, failed.reward) == (Status.TASK_FAILED, False, 0.0)
    assert failed.error.startswith("AssertionError")


def test_score_keeps_the_agents_failure_and_infra_has_no_success(case):
    timeout = _scorer().score(case, _episode(case, Status.TIMEOUT, error="slow"))
    assert (timeout.status, timeout.success, timeout.error, timeout.reward) == (Status.TIMEOUT, False, "slow", None)
    infra = _scorer().score(case, _episode(case, Status.INFRA_ERROR, error="down"))
    assert infra.success is None
    assert _scorer().infra_rollout(case, "x" * 10_000).error.startswith("xxx")


def test_a_body_asking_for_a_fixture_outside_pytest_gets_only_the_offline_ones(tmp_path):
    def test_t(rollout, row, backend, tmp_path):
        pass

    spec = make_spec(tmp_path, body=test_t)
    case = Case(spec=spec, row={"id": "r0"}, sample_index=0, phase="pre")
    rollout = _scorer({"backend": object()}).score(case, _episode(case, result={}))
    assert rollout.status is Status.TASK_ERROR and "tmp_path" in rollout.error  # the task's own mistake


def test_before_body_fails_agent_failures_and_raises_for_the_harness(case):
    scorer = _scorer()
    with pytest.raises(ItemFailed, match="agent_error: it crashed"):
        scorer.before_body(RolloutHandle(_episode(case, Status.AGENT_ERROR, error="it crashed")))
    with pytest.raises(HarnessError, match="infrastructure error in rollout: down"):
        scorer.before_body(RolloutHandle(_episode(case, Status.INFRA_ERROR, error="down")))
    with pytest.raises(ItemFailed, match="strict JSON cannot store"):
        scorer.before_body(RolloutHandle(_episode(case, result={"x": float("nan")})))


def test_run_body_scores_like_pytest_and_checks_what_the_body_set(case):
    handle = RolloutHandle(_episode(case, result={"reply": "4"}))
    seen = {}

    def body(rollout, row):
        seen["reward"] = rollout.reward
        rollout.reward = float("inf")

    with pytest.raises(RewardError, match="rollout.reward"):
        _scorer().run_body(case, handle, body, {"rollout": handle, "row": {}})
    assert seen == {"reward": 1.0} and handle.reward is None


def test_item_verdict_from_pytests_outcome(case):
    completed = RolloutHandle(_episode(case, result={}))
    assert item_verdict(completed, passed=True, error=None) == Verdict(Status.COMPLETED, None, True)
    verdict = item_verdict(completed, passed=False, error="AssertionError: no")
    assert (verdict.status, verdict.error, verdict.success) == (Status.TASK_FAILED, "AssertionError: no", False)
    timeout = RolloutHandle(_episode(case, Status.TIMEOUT, error="slow"))
    assert item_verdict(timeout, passed=False, error="timeout: slow") == Verdict(Status.TIMEOUT, "slow", False)
    infra = RolloutHandle(_episode(case, Status.INFRA_ERROR, error="down"))
    assert item_verdict(infra, passed=False, error="x").success is None
