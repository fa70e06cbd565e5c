"""Scheduling: cases go out to the harness's loop at once; callers wait for one, or for a batch.

`Scheduler` knows items only by an id (pytest's node id, any string): it keeps one future per
item and the rollouts a resumed run already finished (replayed, not rerun), and keeps the
progress display going while a caller waits. It submits through a callable, so a test hands it
any `Case -> Future[Episode]`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import HarnessError
from ..progress import POLL_S, Progress
from ..records import Rollout
from .cases import Case, Episode
from .inflight import InFlight
from .plan import CaseKey, case_key
from .scoring import RolloutHandle

T = TypeVar("T")

Submit = Callable[[Case], "concurrent.futures.Future[Episode]"]


@dataclass
class Pending:
    """One item's rollout: in flight, then scored (`handle`), then recorded (`rollout`)."""

    case: Case
    future: concurrent.futures.Future[Episode]
    handle: RolloutHandle | None = None
    recorded: bool = False
    rollout: Rollout | None = None  # as recorded in rollouts.jsonl


def episode_or_failure(future: concurrent.futures.Future[Episode]) -> tuple[Episode | None, str]:
    """The episode of a finished future, or why there is none (the harness failed)."""
    if not future.done():
        return None, "rollout did not finish"
    if future.cancelled():
        return None, "rollout was cancelled"
    exc = future.exception()
    if exc is not None:
        return None, f"{type(exc).__name__}: {exc}"
    return future.result(), ""


class Scheduler:
    def __init__(self, *, submit: Submit, progress: Progress, live_sessions: Callable[[], int],
                 inflight: InFlight | None = None) -> None:
        """`inflight`: told of every submitted case (`inflight.json`); cleared by `cancel`."""
        self._submit = submit
        self.progress = progress
        self._live_sessions = live_sessions
        self.inflight = inflight
        self.pending: dict[str, Pending] = {}
        self.replayed: dict[str, Rollout] = {}

    def schedule(self, items: Sequence[tuple[str, Case]], *, done: Mapping[CaseKey, Rollout]) -> None:
        """Submit every item's case, except those `done` holds (a resumed run's, replayed)."""
        for item_id, case in items:
            if case_key(case) in done:
                self.replayed[item_id] = done[case_key(case)]
            else:
                self.pending[item_id] = Pending(case=case, future=self._start(case))

    def begin_items(self, phase: str) -> None:
        """Start the items' progress phase (replayed rollouts count as done and scored)."""
        total = len(self.pending) + len(self.replayed)
        if not total:
            return
        self.progress.begin_phase(phase, total, already_done=len(self.replayed))
        for rollout in self.replayed.values():
            self.progress.rollout_scored(rollout.success)
        for pending in self.pending.values():
            pending.future.add_done_callback(self._finished)

    def run_batch(self, cases: Sequence[Case], *, steps: int | None = None) -> list[Episode]:
        """Roll out a batch (pre-eval, one training step) and wait for all of it, showing progress."""
        return self.start_batch(cases, steps=steps).wait()

    def start_batch(self, cases: Sequence[Case], *, steps: int | None = None) -> "RunningBatch":
        """Start a batch's rollouts and return at once; `RunningBatch.wait` collects them."""
        if cases:
            step = cases[0].step
            self.progress.begin_phase(cases[0].phase, len(cases), step=step,
                                      steps=steps if step is not None else None)
        futures = [self._start(case) for case in cases]
        for future in futures:
            future.add_done_callback(self._finished)
        return RunningBatch(self, futures)

    def start_one(self, case: Case) -> concurrent.futures.Future[Episode]:
        """Start one rollout, counted by the progress display when it ends (async training)."""
        future = self._start(case)
        future.add_done_callback(self._finished)
        return future

    def handle(self, item_id: str) -> RolloutHandle:
        """The item's rollout as its task sees it (waits for it); the same handle every time."""
        if item_id in self.replayed:
            return RolloutHandle.from_record(self.replayed[item_id])
        pending = self.pending.get(item_id)
        if pending is None:
            raise HarnessError(f"no rollout was scheduled for {item_id}")
        if pending.handle is None:
            pending.handle = RolloutHandle(self.wait(pending.future))
        return pending.handle

    def wait(self, future: concurrent.futures.Future[Episode]) -> Episode:
        """Wait for one rollout, keeping the progress display going meanwhile."""
        while True:
            try:
                return future.result(timeout=POLL_S)
            except concurrent.futures.TimeoutError:
                self.tick(waiting=True)

    def tick(self, *, waiting: bool = False, force: bool = False) -> None:
        self.progress.tick(self._live_sessions(), waiting=waiting, force=force)
        if self.inflight is not None:
            self.inflight.refresh()

    def cancel(self) -> None:
        """The run ends: cancel what did not start; nothing is in flight from now on."""
        for pending in self.pending.values():
            pending.future.cancel()
        if self.inflight is not None:
            self.inflight.close()

    def _start(self, case: Case) -> concurrent.futures.Future[Episode]:
        future = self._submit(case)
        if self.inflight is not None:
            self.inflight.watch(case, future)
        return future

    def _finished(self, future: concurrent.futures.Future[Episode]) -> None:
        """Count a finished rollout and its sampled tokens (runs on the harness's loop thread)."""
        episode, _ = episode_or_failure(future)
        self.progress.rollout_finished(episode.usage.completion_tokens if episode else 0)


@dataclass
class RunningBatch:
    """A batch's rollouts in flight (`Scheduler.start_batch`)."""

    scheduler: Scheduler
    futures: list[concurrent.futures.Future[Episode]]

    def wait(self) -> list[Episode]:
        """The episodes in the cases' order, keeping the progress display going meanwhile."""
        waiting = concurrent.futures.wait(self.futures, timeout=POLL_S)
        while waiting.not_done:
            self.scheduler.tick(waiting=True)
            waiting = concurrent.futures.wait(self.futures, timeout=POLL_S)
        return [future.result() for future in self.futures]

    def scored(self, score: Callable[[int, Episode], T]) -> list[T]:
        """`score(index, episode)` for each rollout on this thread as soon as it finishes, so the
        status line shows success during the phase, not after it; results in the cases' order."""
        results: dict[int, T] = {}
        while len(results) < len(self.futures):
            waiting = [f for i, f in enumerate(self.futures) if i not in results]
            concurrent.futures.wait(waiting, timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED)
            for index, future in enumerate(self.futures):
                if index not in results and future.done():
                    results[index] = score(index, future.result())
            self.scheduler.tick(waiting=True)
        return [results[index] for index in range(len(self.futures))]

    def cancel(self) -> None:
        """Cancel the rollouts not yet finished (a run that stops before it needs them)."""
        for future in self.futures:
            future.cancel()
