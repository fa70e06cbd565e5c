"""Scoring one episode with its task: reward functions, the test body, and the rollout record.

Used for pytest items (where pytest calls the body) and for rollouts the harness scores itself
(pre-eval and training steps in `run` / `train` modes), so both give identical records.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .records import Rollout, Status, Trace, Usage
from .run.cases import Case, Episode

ERROR_TEXT_LIMIT = 4000
# Fixtures a task body may use when the harness scores a rollout itself (outside a pytest item).
OFFLINE_FIXTURES = ("rollout", "row", "agentcore_rl_config", "gateway")

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


def apply_rewards(handle: RolloutHandle, case: Case, call: Caller) -> None:
    """Run the task's reward functions; their weighted sum becomes `handle.reward`."""
    total = 0.0
    for reward_fn in case.spec.rewards:
        value = call(reward_fn.fn, handle, dict(case.row))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"reward {reward_fn.name} returned {value!r}; a reward must be a number")
        handle.rewards[reward_fn.name] = float(value)
        total += reward_fn.weight * float(value)
    if case.spec.rewards:
        handle.reward = total


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
    except Exception as exc:  # the task's own verdict (AssertionError) or its bug: both fail it
        return Verdict(Status.TASK_FAILED, f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_LIMIT], False)
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
