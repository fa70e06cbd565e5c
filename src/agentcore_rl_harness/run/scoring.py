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

from ..errors import ERROR_TEXT_LIMIT, HarnessError, JudgeError, RewardError, SandboxError, failure_text, is_verdict
from ..judged import JudgeReward
from ..records import Rollout, Status, Trace, Usage
from ..store import json_safe
from ..tasks import AGENT_REWARD
from .cases import Case, Episode

# Fixtures a task body may use when the harness scores a rollout itself (outside a pytest item).
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
        self.task = episode.case.spec.name
        self.task_error: str | None = None  # the task's own code raised while scoring (a bug)
        self._sandbox = episode.sandbox  # an arl.Sandbox when the task keeps its sessions

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
        handle.task = rollout.task
        handle.task_error = None
        handle._sandbox = None  # a recorded rollout's session is gone
        return handle

    @property
    def sandbox(self) -> Any:
        """The session's `arl.Sandbox` for the test body and reward functions: locally its final
        files, on AgentCore the live session; released once the rollout is scored."""
        if self._sandbox is None:
            if self.episode is None:
                raise SandboxError(f"rollout {self.row_id} s{self.sample_index} was recorded "
                                   "before this run resumed: its session is gone")
            raise SandboxError(
                f"task {self.task} keeps no sessions for inspection: declare "
                f"@arl.task(..., sandbox=True) (a test body that takes the `sandbox` fixture "
                "turns it on by itself) to use rollout.sandbox in its rewards")
        return self._sandbox

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


def apply_rewards(handle: RolloutHandle, case: Case, call: Caller, judging: Any = None) -> None:
    """The agent's own reward, then the task's reward functions, whose weighted sum becomes
    `handle.reward` (with `reward_from_agent`, the agent's reward is `handle.reward`). Judged
    rewards are asked of `judging` (`run/judging.py`); without one they are a `JudgeError`."""
    apply_agent_reward(handle, case)
    total = 0.0
    for reward_fn in case.spec.rewards:
        if isinstance(reward_fn, JudgeReward):
            if judging is None:
                raise JudgeError(f"judged reward {reward_fn.name}: no judge is available to this scorer "
                                 "(judged rewards need the harness's run or rescore)")
            value = check_reward(reward_fn.name, call(judging.value, reward_fn, handle, case))
        else:
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
    if handle._sandbox is not None:
        available["sandbox"] = handle._sandbox
    names = list(inspect.signature(case.spec.fn).parameters)
    missing = [name for name in names if name not in available]
    if missing:
        raise TypeError(
            f"task {case.spec.name} uses fixture(s) {missing}; when the harness scores "
            f"rollouts itself (pre-eval, training, rescore) only {sorted(available)} are available"
        )
    return {name: available[name] for name in names}


@dataclass(frozen=True)
class Verdict:
    status: Status
    error: str | None
    success: bool | None


def score_offline(case: Case, handle: RolloutHandle, call: Caller, fixtures: dict, judging: Any = None) -> Verdict:
    """Score like a pytest item would: rewards, then the body; an exception fails the task, a
    judge that gave no score makes it `judge_error`."""
    if handle.status is not Status.COMPLETED:
        return Verdict(handle.status, handle.error, None if handle.status in UNJUDGED else False)
    try:
        apply_rewards(handle, case, call, judging)
        call(case.spec.fn, **offline_arguments(case, handle, fixtures))
        check_handle_rewards(handle)
    except Exception as exc:  # the task's verdict (AssertionError) fails it; its bug is task_error
        drop_bad_rewards(handle)  # never record a NaN the body set before it failed
        if isinstance(exc, JudgeError):
            return Verdict(Status.JUDGE_ERROR, str(exc)[:ERROR_TEXT_LIMIT], None)
        if is_verdict(exc):
            return Verdict(Status.TASK_FAILED, failure_text(exc), False)
        return Verdict(Status.TASK_ERROR, failure_text(exc), None)
    return Verdict(Status.COMPLETED, None, True)


# Statuses that say nothing of the agent's success (the harness or the task's code failed).
UNJUDGED = (Status.INFRA_ERROR, Status.TASK_ERROR, Status.JUDGE_ERROR)


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


class TaskCodeError(ItemFailed):
    """A pytest item's task code (a reward, the body) raised something other than an assertion:
    the item fails with the user's own traceback; its rollout is `task_error`."""


class TaskErrors:
    """A bug in a task's code: its traceback the first time, one line after that."""

    def __init__(self) -> None:
        self._shown: set[str] = set()

    def shown(self, task: str) -> bool:
        return task in self._shown

    def text(self, task: str, error: str) -> str:
        if task in self._shown:
            return f"task_error (a bug in task {task}'s code, traceback shown once above): " + error.split("\n")[0]
        self._shown.add(task)
        return (f"agentcore-rl: task_error: task {task}'s own code raised (a reward, the payload "
                "builder or the test body; not a wrong answer). These rollouts are left out of "
                f"success rates and training; fix the code:\n{error}")


def item_verdict(handle: RolloutHandle, *, passed: bool, error: str | None) -> Verdict:
    """The verdict of a pytest item, from its rollout and whether pytest passed it (`error`:
    why it failed, when it did)."""
    drop_bad_rewards(handle)  # a failed body may have left a bad reward on the handle
    status, why = handle.status, handle.error
    if status is Status.COMPLETED and not passed:
        status, why = (Status.TASK_ERROR, handle.task_error) if handle.task_error else (Status.TASK_FAILED, error)
    if status in UNJUDGED:
        return Verdict(status, why, None)
    return Verdict(status, why, passed if status in (Status.COMPLETED, Status.TASK_FAILED) else False)


class Scorer:
    """Scores episodes with their tasks; `call` runs task code (sync or async) to completion and
    `fixtures()` gives what a body may ask for when the harness calls it (OFFLINE_FIXTURES)."""

    def __init__(self, *, run_id: str, call: Caller, fixtures: Callable[[], dict[str, Any]],
                 judging: Callable[[], Any] | None = None) -> None:
        """`judging`: gives the run's `run.judging.Judging`, asked on the first judged reward."""
        self.run_id = run_id
        self.call = call
        self.fixtures = fixtures
        self.judging = judging

    def _judging(self, case: Case) -> Any:
        needed = any(isinstance(reward, JudgeReward) for reward in case.spec.rewards)
        return self.judging() if needed and self.judging is not None else None

    def score(self, case: Case, episode: Episode) -> Rollout:
        """Rewards, then the body, as a pytest item would; the rollout as it will be recorded.
        The `sandbox` fixture is the episode's own (`Episode.sandbox`, an arl.Sandbox)."""
        handle = RolloutHandle(episode)
        fixtures = self.fixtures()
        verdict = score_offline(case, handle, self.call, fixtures, self._judging(case))
        return self.rollout(case, episode, handle, verdict)

    def before_body(self, handle: RolloutHandle) -> None:
        """A pytest item's checks before its body: the agent's failure fails the item
        (`ItemFailed`), the harness's is an error (`HarnessError`)."""
        if handle.status is Status.INFRA_ERROR:
            raise HarnessError(f"infrastructure error in rollout: {handle.error}")
        if handle.status is Status.TASK_ERROR:  # the payload builder raised
            handle.task_error = handle.error
            raise TaskCodeError(handle.error or "")
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
        try:
            apply_rewards(handle, case, self.call, self._judging(case))
            self.call(body, **arguments)
        except Exception as exc:
            if isinstance(exc, JudgeError):  # not the agent's failure, nor a bug: judge_error
                handle.status, handle.error = Status.JUDGE_ERROR, str(exc)[:ERROR_TEXT_LIMIT]
                raise ItemFailed(handle.error) from None
            if is_verdict(exc):
                raise  # pytest reports the assertion as it always does
            handle.task_error = failure_text(exc)
            raise TaskCodeError(handle.task_error) from None
        check_handle_rewards(handle)  # the body may have set a NaN / non-numeric reward

    def rollout(self, case: Case, episode: Episode | None, handle: RolloutHandle | None,
                verdict: Verdict) -> Rollout:
        return make_rollout(run_id=self.run_id, case=case, episode=episode, handle=handle,
                            verdict=verdict, step=case.step)

    def infra_rollout(self, case: Case, error: str) -> Rollout:
        """The record of a case whose episode never came back (the harness failed)."""
        return self.rollout(case, None, None, Verdict(Status.INFRA_ERROR, error[:ERROR_TEXT_LIMIT], None))
