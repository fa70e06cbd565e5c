"""The training loop of `train` / `run` modes: batches of train rows -> groups -> trainer steps.

Each step draws `trainer.batch_rows` train rows (a seeded shuffle, cycling epochs), rolls out
`group_size` samples per row with the current policy, scores them with the task, applies the
failure policy, runs one trainer step and appends one line to `train/steps.jsonl`.

Failure policy: rollouts that ended `timeout`, `agent_error` or `infra_error` are left out of
their group and counted (a reward-0 sample would bias the advantages); groups left with fewer
than two samples or a constant reward are skipped by the trainer and counted; a rollout that
forked into several traces is one sample of its group (its traces share the advantage).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import HarnessConfig
from ..records import Rollout, Status  # noqa: F401 (Status re-exported)
from ..tasks import TaskSpec, load_rows
from ..train_store import STEPS_FILE, latest_checkpoint, read_steps, rewrite_steps  # noqa: F401 (re-exported)
from ..trainers.base import StepMetrics, Trainer, TrainGroup
from ..trainers.grpo import EXCLUDED_STATUSES as EXCLUDED
from ..trainers.grpo import training_reward
from .cases import Case, Episode


@dataclass(frozen=True)
class TrainPlan:
    steps: int
    batch_rows: int
    group_size: int | None
    checkpoint_every: int
    seed: int

    @classmethod
    def from_config(cls, config: HarnessConfig) -> "TrainPlan":
        """The plan of the `trainer` / `algo` nodes' loop keys and the run's seed."""
        loop = config.trainer.loop
        return cls(steps=loop.steps, batch_rows=loop.batch_rows, group_size=loop.group_size,
                   checkpoint_every=loop.checkpoint_every, seed=config.seed)


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
        run_cases: Callable[[list[Case]], list[Episode]],
        score: Callable[[Case, Episode], Rollout],
        trainer: Trainer,
        run_dir: Path,
        write: Callable[[str], None],
        start_step: int = 0,
        on_step: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.plan = plan
        self.specs = specs
        self.run_cases = run_cases
        self.score = score
        self.trainer = trainer
        self.train_dir = run_dir / "train"
        self.checkpoint_dir = run_dir / "checkpoints"
        self.write = write
        self.start_step = start_step
        self.on_step = on_step  # each step's line once it is in train/steps.jsonl (the trackers)
        self.schedule = RowSchedule(specs, plan.seed)
        self.schedule.skip_steps(start_step, plan.batch_rows)

    def run(self, step_once: Callable[[list[TrainGroup]], StepMetrics]) -> list[dict[str, Any]]:
        """Run the remaining steps; `step_once(groups)` runs one trainer step and returns metrics."""
        self.train_dir.mkdir(parents=True, exist_ok=True)
        lines = []
        for step in range(self.start_step, self.plan.steps):
            lines.append(self._step(step, step_once))
            if (step + 1) % self.plan.checkpoint_every == 0 or step + 1 == self.plan.steps:
                path = self.checkpoint_dir / f"step-{step + 1:05d}"
                self.trainer.save_checkpoint(path)
        return lines

    def _step(self, step: int, step_once: Callable[[list[TrainGroup]], StepMetrics]) -> dict[str, Any]:
        started = time.monotonic()
        cases = [
            Case(spec=spec, row=row, sample_index=index, phase="train", step=step)
            for spec, row in self.schedule.take(self.plan.batch_rows)
            for index in range(self.plan.group_size or spec.samples)
        ]
        episodes = self.run_cases(cases)
        rollouts = [self.score(case, episode) for case, episode in zip(cases, episodes)]
        rollout_s = time.monotonic() - started
        groups, excluded = build_groups(rollouts)
        metrics = step_once(groups)
        train_s = time.monotonic() - started - rollout_s
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
            **metrics.to_json(),
            "wall_time_s": {
                "rollout": round(rollout_s, 3),
                "train": round(train_s, 3),
                "total": round(time.monotonic() - started, 3),
            },
        }
        line["step"] = step
        with open(self.train_dir / STEPS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
        if self.on_step is not None:
            self.on_step(line)
        self.write(
            f"agentcore-rl train step {step + 1}/{self.plan.steps}: reward "
            f"{_fmt(line['reward_mean'])}, success {_fmt(line['success_rate'])}, loss "
            f"{_fmt(line.get('loss'))}, {len(groups)} groups, {line['wall_time_s']['total']}s"
        )
        return line


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"
