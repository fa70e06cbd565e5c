"""The training loop of `train` / `run` modes: batches of train rows -> groups -> trainer steps.

Each step draws `trainer.batch_rows` train rows (a seeded shuffle, cycling epochs), rolls out
`group_size` samples per row with the current policy, scores them with the task, applies the
failure policy, runs one trainer step and appends one line to `train/steps.jsonl`.

With `trainer.overlap_rollouts` the next step's rollouts start as soon as this step's have
finished, so they run during this step's update (one step off-policy: a turn is sampled by the
policy of its moment, the sampler records its logprobs and version, and the importance ratio
corrects for the lag; `staleness_*` in each step's line says how far behind they were).

Failure policy: rollouts that ended `timeout`, `agent_error` or `infra_error` are left out of
their group and counted (a reward-0 sample would bias the advantages); groups left with fewer
than two samples or a constant reward are skipped by the trainer and counted; a rollout that
forked into several traces is one sample of its group (its traces share the advantage).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import HarnessConfig
from ..recipe.exploration import Adaptation
from ..records import Rollout
from ..tasks import TaskSpec, load_rows
from ..train_store import append_step, latest_checkpoint
from ..trainers.base import StepMetrics, Trainer, TrainGroup
from ..trainers.grpo import EXCLUDED_STATUSES as EXCLUDED
from ..trainers.grpo import build_batch, training_reward
from .cases import Case, Episode
from .learning_signal import idle_warning, step_signal
from .step_lines import budget_stop_line, stopped_in_update, update_result_line, update_start_line


@dataclass(frozen=True)
class TrainPlan:
    steps: int
    batch_rows: int
    group_size: int | None
    checkpoint_every: int
    seed: int
    overlap: bool = False
    mode: str = "sync"  # "async": `async_loop.AsyncTrainingLoop` runs the steps
    max_staleness: int = 2
    stragglers: str = "wait"
    min_group_fraction: float = 0.5

    @classmethod
    def from_config(cls, config: HarnessConfig) -> "TrainPlan":
        """The plan of the `trainer` / `algo` nodes' loop keys and the run's seed."""
        loop = config.trainer.loop
        return cls(steps=loop.steps, batch_rows=loop.batch_rows, group_size=loop.group_size,
                   checkpoint_every=loop.checkpoint_every, seed=config.seed, overlap=loop.overlap_rollouts,
                   mode=loop.mode, max_staleness=loop.max_staleness, stragglers=loop.stragglers,
                   min_group_fraction=loop.min_group_fraction)

    def group_of(self, specs: Sequence[TaskSpec]) -> int:
        """Samples per train row: `algo.group_size`, else the most any task asks for (`samples=`)."""
        return self.group_size or max((spec.samples for spec in specs), default=1)

    def rollouts_left(self, specs: Sequence[TaskSpec], start_step: int) -> int:
        """The train rollouts of the steps after `start_step` (the progress display's total)."""
        return max(0, self.steps - start_step) * self.batch_rows * self.group_of(specs)


def build_groups(rollouts: Sequence[Rollout]) -> tuple[list[TrainGroup], dict[str, int]]:
    """`grpo.groups_from_rollouts`, with every excluded status counted (0 when none)."""
    from ..trainers.grpo import groups_from_rollouts

    groups, counted = groups_from_rollouts(rollouts)
    return groups, {status.value: counted.get(status.value, 0) for status in EXCLUDED}


class RowSchedule:
    """A seeded, epoch-cycling order over every task's train rows."""

    def __init__(self, specs: Sequence[TaskSpec], seed: int) -> None:
        self._rows = [(spec, row) for spec in specs for row in load_rows(spec, "train")]
        if not self._rows:
            names = ", ".join(spec.name for spec in specs)
            raise ValueError(f"no train rows in the datasets of task(s) {names}")
        self._rng = random.Random(seed)
        self._queue: list[tuple[TaskSpec, dict]] = []

    def take(self, count: int) -> list[tuple[TaskSpec, dict]]:
        batch = []
        while len(batch) < count:
            if not self._queue:
                self._queue = list(self._rows)
                self._rng.shuffle(self._queue)
            batch.append(self._queue.pop())
        return batch

    def skip_steps(self, steps: int, batch_rows: int) -> None:
        """Advance as if `steps` steps had run (resume continues the same row order)."""
        for _ in range(steps):
            self.take(batch_rows)


class TrainingLoop:
    def __init__(
        self,
        *,
        plan: TrainPlan,
        specs: Sequence[TaskSpec],
        start_cases: Callable[[list[Case]], Batch],
        score: Callable[[Case, Episode], Rollout],
        trainer: Trainer,
        run_dir: Path,
        write: Callable[[str], None],
        start_step: int = 0,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        adapt: Callable[[dict[str, Any], list[Rollout]], Adaptation] | None = None,
    ) -> None:
        self.plan = plan
        self.specs = specs
        self.start_cases = start_cases
        self.score = score
        self.trainer = trainer
        self.train_dir = run_dir / "train"
        self.checkpoint_dir = run_dir / "checkpoints"
        self.write = write
        self.start_step = start_step
        self.on_step = on_step  # each step's line once it is in train/steps.jsonl (the trackers)
        # before a step's line is written: its extra signal fields, a new group size for the steps
        # not yet started, or the end of training after it (`recipe.py`'s StepAdapter)
        self.adapt = adapt
        self.idle_streak = 0  # steps in a row that trained nothing
        self.stopped_after: int | None = None  # the step the time budget ended training at
        self.schedule = RowSchedule(specs, plan.seed)
        self.schedule.skip_steps(start_step, plan.batch_rows)

    def run(self, step_once: Callable[[list[TrainGroup]], StepMetrics]) -> list[dict[str, Any]]:
        """Run the remaining steps; `step_once(groups)` runs one trainer step and returns metrics.
        Steps are numbered from 1 (`start_step` is the number of steps already done)."""
        self.train_dir.mkdir(parents=True, exist_ok=True)
        lines: list[dict[str, Any]] = []
        last = self.plan.steps
        batch = self._start(self.start_step + 1) if self.start_step < last else None
        last_line_at = time.monotonic()
        try:
            for step in range(self.start_step + 1, last + 1):
                current, batch = batch, None
                if current is None:  # cannot happen: every step below the last starts the next
                    raise RuntimeError(f"training step {step} has no rollouts in flight")
                episodes = current.rollouts.wait()
                rollout_s = time.monotonic() - current.started
                if self.plan.overlap and step < last:
                    batch = self._start(step + 1)  # runs during this step's scoring and update
                due = step % self.plan.checkpoint_every == 0 or step == last
                checkpoint = checkpoint_name(step) if due else None
                line = self._train(step, current.cases, episodes, rollout_s, step_once, last_line_at,
                                   checkpoint)
                last_line_at = time.monotonic()
                lines.append(line)
                if line["checkpoint"] is not None:
                    self.trainer.save_checkpoint(self.checkpoint_dir / line["checkpoint"])
                if self.stopped_after == step:  # the time budget's choice: as if `step` were the last
                    self._say_stopped(step, batch)
                    break
                if batch is None and step < last:
                    batch = self._start(step + 1)
        finally:
            if batch is not None:  # a step failed (or was stopped) with the next one in flight
                batch.rollouts.cancel()
        return lines

    def _say_stopped(self, step: int, batch: "_Started | None") -> None:
        in_flight = (f"; the {len(batch.cases)} rollouts of step {step + 1} in flight are stopped (never trained)"
                     if batch is not None else "")
        self.write(budget_stop_line(step=step, steps=self.plan.steps, checkpoint=checkpoint_name(step),
                                    in_flight=in_flight))

    def _start(self, step: int) -> "_Started":
        cases = [
            Case(spec=spec, row=row, sample_index=index, phase="train", step=step)
            for spec, row in self.schedule.take(self.plan.batch_rows)
            for index in range(self.plan.group_size or spec.samples)
        ]
        return _Started(cases, time.monotonic(), self.start_cases(cases))

    def _train(
        self,
        step: int,
        cases: list[Case],
        episodes: list[Episode],
        rollout_s: float,
        step_once: Callable[[list[TrainGroup]], StepMetrics],
        since: float,
        checkpoint: str | None = None,
    ) -> dict[str, Any]:
        rollouts = [self.score(case, episode) for case, episode in zip(cases, episodes)]
        groups, excluded = build_groups(rollouts)
        _, batch = build_batch(groups, normalize_std=False)  # what the update will train on
        trained = time.monotonic()
        try:
            self.write(update_start_line(step=step, steps=self.plan.steps, groups_used=batch.groups_used,
                                         groups_total=batch.groups_total, tokens=batch.trained_tokens))
            metrics = step_once(groups)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM: say what becomes of the step, then stop
            self.write(stopped_in_update(step=step, steps=self.plan.steps, rollouts=len(rollouts),
                                         checkpoint=latest_checkpoint(self.train_dir.parent)))
            raise
        train_s = time.monotonic() - trained
        rewards = [training_reward(r) for r in rollouts if r.status not in EXCLUDED]
        successes = [bool(r.success) for r in rollouts if r.status not in EXCLUDED]
        line = {
            "step": step,
            "rollouts": len(rollouts),
            "excluded": excluded,
            "groups": len(groups),
            "reward_mean": statistics.fmean(rewards) if rewards else None,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else None,
            "success_rate": statistics.fmean(successes) if successes else None,
            **step_signal(rollouts),
            **metrics.to_json(),
            # rollout: from the batch's start until its last episode ended (with overlap_rollouts
            # it began during the previous update); train: the update; total: the wall time since
            # the previous step's line (the steps' totals add up to the loop's wall time)
            "wall_time_s": {
                "rollout": round(rollout_s, 3),
                "train": round(train_s, 3),
                "total": round(time.monotonic() - since, 3),
            },
        }
        # the run's step number (from 1, as checkpoints and the terminal count), not the
        # trainer's own count, which a warm-up or a resumed trainer may have moved
        line["step"] = step
        line["checkpoint"] = checkpoint  # saved after this step (resume continues after it)
        if self.adapt is not None:
            adaptation = self.adapt(line, rollouts)
            line.update(adaptation.fields)
            if adaptation.group_size is not None:
                self.plan = dataclasses.replace(self.plan, group_size=adaptation.group_size)
            if adaptation.stop:  # the last step now: checkpointed whatever checkpoint_every says
                self.stopped_after = step
                line["checkpoint"] = checkpoint_name(step)
        append_step(self.train_dir.parent, line)
        if self.on_step is not None:
            self.on_step(line)
        self.write(update_result_line(line, steps=self.plan.steps))
        self.idle_streak = self.idle_streak + 1 if not line["trained_tokens"] else 0
        if self.idle_streak:
            self.write(idle_warning(line, streak=self.idle_streak, total_steps=self.plan.steps))
        return line


class Batch(Protocol):
    """A batch's rollouts in flight (`schedule.RunningBatch`)."""

    def wait(self) -> list[Episode]: ...

    def cancel(self) -> None: ...


@dataclass(frozen=True)
class _Started:
    cases: list[Case]
    started: float
    rollouts: Batch


def checkpoint_name(step: int) -> str:
    """The checkpoint saved after `step` (numbered from 1, as steps.jsonl and the terminal are)."""
    return f"step-{step:05d}"
