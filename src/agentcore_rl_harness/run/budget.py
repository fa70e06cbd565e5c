"""The time budget in a run (`recipe/budget.py` decides): the evaluations' walls before training
measured as the final evaluation's estimate, a loud line when the budget is spent before training, the
stop choice after a step (recorded in recipe.json and the step's line), and a resumed run held
to a stop its steps.jsonl records.

A resumed run never trains past a step the budget stopped at; one stopped before the budget
chose (Ctrl-C) is given the budget again, counted from the resumed process's start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import HarnessConfig
from ..recipe.budget import TimeBudget
from ..recipe.choices import Choice, RecipeLog
from .training import TrainPlan

OBSERVED = "time_budget"  # its key in recipe.json's observations


class RunBudget:
    """One run's budget with the log its choice goes to."""

    def __init__(self, budget: TimeBudget, log: RecipeLog, *, run_dir: Path, write: Callable[[str], None]) -> None:
        self.budget, self.log, self.run_dir, self.write = budget, log, run_dir, write

    @classmethod
    def of(cls, config: HarnessConfig, log: RecipeLog | None, *, run_dir: Path, started: float,
           write: Callable[[str], None]) -> "RunBudget | None":
        """The budget `recipe.time_budget_min` sets (None: none). `log` is the run's recipe log;
        a resumed run has none and adds its choice to the one recipe.json recorded."""
        minutes = config.recipe.time_budget_min
        if minutes is None:
            return None
        log = log if log is not None else RecipeLog.reopened(run_dir, write)
        budget = TimeBudget(minutes, started=started)
        budget.eval_s = float(log.observations.get(OBSERVED, {}).get("eval_s", 0.0))  # a resumed run's
        return cls(budget, log, run_dir=run_dir, write=write)

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        """Measures an evaluation before training (the pre-evaluation, the one after the warm-up):
        the longest is the post-evaluation's estimate (a trained agent's episodes run longer: on
        office 1m 56 s before, 2 min 7 s after the warm-up; a resumed run that kept its
        evaluations keeps the wall it recorded)."""
        started = self.budget.clock()
        yield
        self.budget.eval_s = max(self.budget.eval_s, self.budget.clock() - started)
        self._save()

    def training_starts(self) -> None:
        warning = self.budget.training_starts()
        if warning:
            self.write(warning)

    def warm_up(self, share: float) -> Callable[[], str | None]:
        """From now (the automatic warm-up's start): before each chunk, why no more starts, or None."""
        return self.budget.warm_up(share).spent

    def after_step(self, line: dict[str, Any], *, steps: int) -> Choice | None:
        """The stop choice after this step's line (logged and saved), or None to go on."""
        choice = self.budget.after_step(step=line["step"], steps=steps)
        if choice is not None:
            self.log.add(choice)
        self._save()
        return choice

    def _save(self) -> None:
        self.log.observations[OBSERVED] = self.budget.observations()
        self.log.save(self.run_dir)


def stopped_at(train_steps: Sequence[dict[str, Any]]) -> int | None:
    """The step a recorded budget stop ended training at (steps.jsonl's `recipe`), if any."""
    stops = [choice["value"] for line in train_steps for choice in line.get("recipe") or []
             if choice.get("key") == "trainer.steps" and choice.get("applied")]
    return stops[-1] if stops else None


def held_to_stop(plan: TrainPlan, train_steps: Sequence[dict[str, Any]], write: Callable[[str], None]) -> TrainPlan:
    """A resumed run's plan: no step past a recorded budget stop."""
    stop = stopped_at(train_steps)
    if stop is None or stop >= plan.steps:
        return plan
    write(f"agentcore-rl resume: the time budget stopped training after step {stop} of trainer.steps={plan.steps} "
          "(train/steps.jsonl); a resumed run trains no step past it")
    return dataclasses.replace(plan, steps=stop)


def idle_budget(config: HarnessConfig, mode: str) -> str | None:
    """What to say when a budget is set in a mode that trains nothing (None otherwise)."""
    minutes = config.recipe.time_budget_min
    if minutes is None or mode in ("run", "train"):
        return None
    return (f"recipe.time_budget_min={minutes:g} sizes training; --agentcore-rl {mode} trains nothing, so it "
            "changes nothing here")
