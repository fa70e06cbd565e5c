"""The run's units of work: a `Case` (task, row, sample) and the `Episode` that ran it.

An episode may hold resources past the end of its agent session (the session's sandbox, kept so
the task can inspect its files): they go on `Episode.held` and are released once the rollout is
scored (`HeldResources.release`), or at the latest when the harness closes.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..records import SessionOutcome, Trace, Usage
from ..tasks import TaskSpec


# The phases whose rollouts measure the policy (eval mode's items, and run mode's pre, after the
# warm-up and post; recipe=auto's "probe" of train rows): they sample with `eval.temperature` when it is set. train and collect rollouts
# feed a trainer and keep `sampling.temperature`.
EVAL_PHASES = frozenset({"eval", "pre", "warmup", "post", "probe"})
DEMO_PHASE = "demo"  # the warm-up's teacher-forced oracle episodes (`warmup.py`)


@dataclass(frozen=True)
class Case:
    """One pytest item of a task: a dataset row and a sample index within its group."""

    spec: TaskSpec
    row: dict[str, Any]
    sample_index: int
    phase: str
    step: int | None = None
    agent: str | None = None  # the agent choice (`agent=` config) for this case; None: the run's

    @property
    def row_id(self) -> str:
        return str(self.row["id"])

    @property
    def group_id(self) -> str:
        suffix = "" if self.step is None else f"/{self.step}"
        return f"{self.spec.name}/{self.row_id}/{self.phase}{suffix}"


class HeldResources:
    """What an episode keeps alive until it is scored: async closers, released once, in reverse."""

    def __init__(self) -> None:
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.released = False

    def hold(self, aclose: Callable[[], Awaitable[None]]) -> None:
        """Keep a resource until `release` (a closer given after release runs at the next one)."""
        self._closers.append(aclose)
        self.released = False

    async def release(self) -> None:
        """Close everything held; a closer's error is logged, the others still run."""
        closers, self._closers = self._closers[::-1], []
        self.released = True
        for aclose in closers:
            try:
                await aclose()
            except Exception:  # one leaked resource must not keep the others alive
                logging.getLogger(__name__).exception("releasing an episode's resource failed")

    def __bool__(self) -> bool:
        return bool(self._closers)


@dataclass(frozen=True)
class Episode:
    """What came back from one agent session, before the task scored it."""

    case: Case
    session_id: str
    outcome: SessionOutcome
    traces: tuple[Trace, ...]
    turns: int
    usage: Usage
    session_metadata: dict[str, Any] = field(default_factory=dict)
    held: HeldResources = field(default_factory=HeldResources, compare=False, repr=False)
    sandbox: Any = field(default=None, compare=False, repr=False)  # an arl.Sandbox, or None


def case_seed(run_seed: int, case: Case) -> int:
    """The sampling seed of one case: stable across runs and resumes, distinct per case."""
    key = f"{run_seed}/{case.spec.name}/{case.row_id}/{case.sample_index}/{case.phase}/{case.step}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
