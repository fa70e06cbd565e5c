"""Scoring one episode with its task: reward functions, the test body, and the rollout record.

`Scorer` is the one scorer: pytest items (pytest calls the body, `Scorer.before_body` /
`run_body` / `item_verdict`), rollouts the harness scores itself (pre-eval and training steps,
`Scorer.score`) and the verl / slime episode runners all go through it, so all give identical
records. It raises no pytest exception: `ItemFailed` is mapped to `pytest.fail` in
`pytest_outcomes.py`.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ERROR_TEXT_LIMIT, HarnessError, RewardError, failure_text
from ..records import Rollout, Status, Trace, Usage
from ..store import json_safe
from ..tasks import AGENT_REWARD
from .cases import Case, Episode
from .loop import LoopThread
from .sandbox import Sandbox

# Fixtures a task body may use when the harness scores a rollout itself (outside a pytest item);
# `sandbox` when the episode kept its session's files (a task that takes it keeps them).
OFFLINE_FIXTURES = ("rollout", "row", "agentcore_rl_config", "gateway", "backend", "sandbox")

Caller = Callable[..., Any]  # runs a sync or async function to completion, returns its value


class RolloutHandle:
    """What a task test sees as `rollout`: the finished episode, scorable and overridable."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        self.session_id = episode.session_id
        self.row_id = episode.case.row_id
        self.sample_index = episode.case.sample_index
        self.status: Status = episode.outcome.status
        self.error = episode.outcome.error
        self.result: dict[str, Any] = dict(episode.outcome.result or {})
        self.traces: tuple[Trace, ...] = episode.traces
        self.turns = episode.turns
        self.usage: Usage = episode.usage
        self.elapsed_s = episode.outcome.elapsed_s
        self.rewards: dict[str, float] = {}
        self.reward: float | None = None

    @classmethod
    def from_record(cls, rollout: Rollout) -> "RolloutHandle":
        """A handle over a recorded rollout (a resumed run's finished item)."""
        handle = cls.__new__(cls)
        handle.episode = None
        handle.session_id = rollout.session_id
        handle.row_id = rollout.row_id
        handle.sample_index = rollout.sample_index
        handle.status = rollout.status
        handle.error = rollout.error
        handle.result = dict(rollout.result or {})
        handle.traces = rollout.traces
        handle.turns = rollout.turns
        handle.usage = rollout.usage
        handle.elapsed_s = rollout.elapsed_s
        handle.rewards = dict(rollout.rewards)
        handle.reward = rollout.reward
        return handle

    def __repr__(self) -> str:
        return (
            f"<rollout {self.row_id} s{self.sample_index} status={self.status.value} "
            f"reward={self.reward} turns={self.turns}>"
        )


def check_reward(name: str, value: Any) -> float:
    """`value` as a float, or a `RewardError` naming the reward and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RewardError(
            f"reward {name} is {value!r} ({type(value).__name__}); a reward must be a finite "
            "number (int or float)"
        )
    number = float(value)
    if not math.isfinite(number):
        raise RewardError(
            f"reward {name} is {number!r}; a reward must be a finite number, not NaN or inf"
        )
    return number


def agent_reward(result: dict[str, Any]) -> tuple[float | None, dict[str, float]]:
    """The reward the agent reported in its result, and its parts by name.

    `reward` (a number) is the total; else `rewards`: a number, a list of numbers (summed; the
    parts are `agent[i]` when there are several) or a dict of numbers (summed; parts
    `agent.<name>`). (None, {}) if the agent reported none.
    """
    raw = result.get("rewards")
    parts: dict[str, float] = {}
    if isinstance(raw, dict):
        parts = {f"{AGENT_REWARD}.{k}": check_reward(f"agent rewards[{k!r}]", v) for k, v in raw.items()}
    elif isinstance(raw, (list, tuple)):
        values = [check_reward(f"agent rewards[{i}]", v) for i, v in enumerate(raw)]
        parts = {f"{AGENT_REWARD}[{i}]": v for i, v in enumerate(values)} if len(values) > 1 else {}
        total = sum(values)
    if "reward" in result:
        return check_reward("agent reward", result["reward"]), parts
    if raw is None:
        return None, {}
    if isinstance(raw, dict):
        return check_reward("agent rewards (sum)", sum(parts.values())), parts
    if isinstance(raw, (list, tuple)):
        return check_reward("agent rewards (sum)", total), parts
    return check_reward("agent rewards", raw), parts


def apply_agent_reward(handle: RolloutHandle, case: Case) -> None:
    """Record the agent's own reward (`rewards['agent']`, parts beside it); with
    `reward_from_agent` it is the rollout's reward, and a missing or bad one fails the task."""
    spec = case.spec
    try:
        reported, parts = agent_reward(handle.result)
    except RewardError:
        if spec.reward_from_agent:
            raise
        return  # not the task's reward: a bad self-score is left in `result`, not recorded
    if reported is not None:
        handle.rewards[AGENT_REWARD] = reported
        handle.rewards.update(parts)
    if not spec.reward_from_agent:
        return
    if reported is None:
        raise RewardError(
            f"task {spec.name} takes its reward from the agent (reward_from_agent=True), but the "
            f"agent's result has no `reward` or `rewards` (its keys: {sorted(handle.result)}); an "
            "agent that saves its result only to S3 (agentcore-rl-toolkit's AgentCoreRLApp) "
            "needs runtime.result_mode=s3"
        )
    handle.reward = reported


def apply_rewards(handle: RolloutHandle, case: Case, call: Caller) -> None:
    """The agent's own reward, then the task's reward functions, whose weighted sum becomes
    `handle.reward` (with `reward_from_agent`, the agent's reward is `handle.reward`)."""
    apply_agent_reward(handle, case)
    total = 0.0
    for reward_fn in case.spec.rewards:
        value = check_reward(reward_fn.name, call(reward_fn.fn, handle, dict(case.row)))
        handle.rewards[reward_fn.name] = value
        total += reward_fn.weight * value
    if case.spec.rewards:
        handle.reward = check_reward("(weighted sum)", total)


def check_handle_rewards(handle: RolloutHandle) -> None:
    """After the test body (which may set `rollout.reward` / `rollout.rewards`): every reward is
    a finite number. Bad values are removed from the handle (never recorded) and reported."""
    problems = drop_bad_rewards(handle)
    if problems:
        raise RewardError("; ".join(problems))


def drop_bad_rewards(handle: RolloutHandle) -> list[str]:
    """Remove rewards that are not finite numbers from `handle`; say what each one was."""
    problems = []
    if handle.reward is not None:
        try:
            handle.reward = check_reward("rollout.reward", handle.reward)
        except RewardError as exc:
            handle.reward = None
            problems.append(str(exc))
    for name, value in list(handle.rewards.items()):
        try:
            handle.rewards[name] = check_reward(str(name), value)
        except RewardError as exc:
            del handle.rewards[name]
            problems.append(str(exc))
    return problems


def offline_arguments(case: Case, handle: RolloutHandle, fixtures: dict[str, Any]) -> dict:
    """Arguments for calling a task body outside pytest; other fixtures are a clear error."""
    available = {"rollout": handle, "row": dict(case.row), **fixtures}
    names = list(inspect.signature(case.spec.fn).parameters)
    missing = [name for name in names if name not in available]
    if missing:
        raise TypeError(
            f"task {case.spec.name} uses fixture(s) {missing}; when the harness scores "
            f"training rollouts itself only {list(OFFLINE_FIXTURES)} are available"
        )
    return {name: available[name] for name in names}


@dataclass(frozen=True)
class Verdict:
    status: Status
    error: str | None
    success: bool | None


def score_offline(case: Case, handle: RolloutHandle, call: Caller, fixtures: dict) -> Verdict:
    """Score like a pytest item would: rewards, then the body; an exception fails the task."""
    if handle.status is not Status.COMPLETED:
        return Verdict(handle.status, handle.error, None if handle.status is Status.INFRA_ERROR else False)
    try:
        apply_rewards(handle, case, call)
        call(case.spec.fn, **offline_arguments(case, handle, fixtures))
        check_handle_rewards(handle)
    except Exception as exc:  # the task's own verdict (AssertionError) or its bug: both fail it
        drop_bad_rewards(handle)  # never record a NaN the body set before it failed
        return Verdict(Status.TASK_FAILED, failure_text(exc), False)
    return Verdict(Status.COMPLETED, None, True)


def make_rollout(
    *, run_id: str, case: Case, episode: Episode | None, handle: RolloutHandle | None,
    verdict: Verdict, step: int | None,
) -> Rollout:
    return Rollout(
        run_id=run_id,
        task=case.spec.name,
        row_id=case.row_id,
        sample_index=case.sample_index,
        group_id=case.group_id,
        phase=case.phase,
        step=step,
        session_id=episode.session_id if episode else "",
        status=verdict.status,
        error=verdict.error,
        reward=handle.reward if handle else None,
        rewards=dict(handle.rewards) if handle else {},
        success=verdict.success,
        result=episode.outcome.result if episode else None,
        turns=episode.turns if episode else 0,
        usage=episode.usage if episode else Usage(),
        elapsed_s=round(episode.outcome.elapsed_s, 3) if episode else 0.0,
        traces=episode.traces if episode else (),
    )


class ItemFailed(Exception):
    """A pytest item fails with this message and no traceback (`pytest_outcomes` maps it to
    `pytest.fail(message, pytrace=False)`): the agent failed, or its result cannot be stored."""


def item_verdict(handle: RolloutHandle, *, passed: bool, error: str | None) -> Verdict:
    """The verdict of a pytest item, from its rollout and whether pytest passed it (`error`:
    why it failed, when it did)."""
    drop_bad_rewards(handle)  # a failed body may have left a bad reward on the handle
    status, why = handle.status, handle.error
    if status is Status.COMPLETED and not passed:
        status, why = Status.TASK_FAILED, error
    if status is Status.INFRA_ERROR:
        return Verdict(status, why, None)
    return Verdict(status, why, passed if status in (Status.COMPLETED, Status.TASK_FAILED) else False)


class Scorer:
    """Scores episodes with their tasks; `call` runs task code (sync or async) to completion and
    `fixtures()` gives what a body may ask for when the harness calls it (OFFLINE_FIXTURES)."""

    def __init__(self, *, run_id: str, call: Caller, fixtures: Callable[[], dict[str, Any]],
                 loop: LoopThread | None = None) -> None:
        self.run_id = run_id
        self.call = call
        self.fixtures = fixtures
        self.loop = loop  # the harness's: a body's `sandbox.sync` calls run on it

    def score(self, case: Case, episode: Episode) -> Rollout:
        """Rewards, then the body, as a pytest item would; the rollout as it will be recorded."""
        handle = RolloutHandle(episode)
        fixtures = self.fixtures()
        if episode.sandbox is not None:
            fixtures = {**fixtures, "sandbox": Sandbox(episode.sandbox, loop=self.loop)}
        verdict = score_offline(case, handle, self.call, fixtures)
        return self.rollout(case, episode, handle, verdict)

    def before_body(self, handle: RolloutHandle) -> None:
        """A pytest item's checks before its body: the agent's failure fails the item
        (`ItemFailed`), the harness's is an error (`HarnessError`)."""
        if handle.status is Status.INFRA_ERROR:
            raise HarnessError(f"infrastructure error in rollout: {handle.error}")
        if handle.status is not Status.COMPLETED:
            raise ItemFailed(f"{handle.status.value}: {handle.error}")
        unstorable: list[str] = []
        json_safe(handle.result, "result", unstorable)
        if unstorable:  # the record could not hold it: fail here, as the record will say
            raise ItemFailed("the agent's result holds values strict JSON cannot store: "
                             + "; ".join(unstorable))

    def run_body(self, case: Case, handle: RolloutHandle, body: Callable[..., Any],
                 arguments: dict[str, Any]) -> None:
        """A pytest item's scoring: rewards, then its body with pytest's fixture values."""
        self.before_body(handle)
        apply_rewards(handle, case, self.call)
        self.call(body, **arguments)
        check_handle_rewards(handle)  # the body may have set a NaN / non-numeric reward

    def rollout(self, case: Case, episode: Episode | None, handle: RolloutHandle | None,
                verdict: Verdict) -> Rollout:
        return make_rollout(run_id=self.run_id, case=case, episode=episode, handle=handle,
                            verdict=verdict, step=case.step)

    def infra_rollout(self, case: Case, error: str) -> Rollout:
        """The record of a case whose episode never came back (the harness failed)."""
        return self.rollout(case, None, None, Verdict(Status.INFRA_ERROR, error[:ERROR_TEXT_LIMIT], None))
