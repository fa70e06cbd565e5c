"""A run's training steps, by the loop `trainer.mode` names: `training.py`'s (sync, each step
waits for its batch; `overlap_rollouts` starts the next one during the update) or
`async_loop.py`'s (no step waits for its slowest rollout). Both take the same step adapter
(`recipe.StepAdapter`: the step's signal, the recipe's choices, the time budget's stop)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..recipe.exploration import Adaptation
from ..records import Rollout
from ..tasks import TaskSpec
from ..trainers.base import Trainer
from .async_loop import AsyncTrainingLoop
from .cases import Case, Episode
from .loop import LoopThread
from .staleness import next_launch
from .training import Batch, TrainingLoop, TrainPlan


@dataclass(frozen=True)
class StepSources:
    """What the loops take from their run: how rollouts start and are scored, and where lines go."""

    start_batch: Callable[[list[Case]], Batch]  # the sync loop's batches
    start_one: Callable[[Case], concurrent.futures.Future[Episode]]  # the async loop's rollouts
    score: Callable[[Case, Episode], Rollout]
    tick: Callable[[], None]  # the progress display while the async loop waits
    run_dir: Path
    write: Callable[[str], None]
    concurrency: int
    resumed: Sequence[Rollout]  # a resumed run's kept rollouts (the async loop's next launch)


def train_steps(plan: TrainPlan, specs: Sequence[TaskSpec], *, sources: StepSources, trainer: Trainer,
                loop: LoopThread, start_step: int, adapt: Callable[[dict[str, Any], list[Rollout]], Adaptation],
                on_step: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    """Train the steps after `start_step`; their lines (as in train/steps.jsonl)."""
    if plan.mode == "async":
        return AsyncTrainingLoop(
            plan=plan, specs=specs, submit=sources.start_one, score=sources.score, trainer=trainer,
            run_dir=sources.run_dir, write=sources.write, start_step=start_step, concurrency=sources.concurrency,
            on_step=on_step, adapt=adapt, first_launch=next_launch(sources.resumed), tick=sources.tick,
        ).run(lambda groups: loop.submit(trainer.step(groups=groups)))
    return TrainingLoop(plan=plan, specs=specs, start_cases=sources.start_batch, score=sources.score,
                        trainer=trainer, run_dir=sources.run_dir, write=sources.write, start_step=start_step,
                        on_step=on_step, adapt=adapt).run(lambda groups: loop.run(trainer.step(groups=groups)))
