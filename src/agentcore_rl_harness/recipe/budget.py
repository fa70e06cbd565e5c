"""A time budget (`recipe.time_budget_min`): the run sizes its training to the wall time it is given.

The whole run counts, from its start: the pre-evaluation, the automatic warm-up, the training
steps and the post-evaluation. After each training step the budget estimates what one more
step would cost (the longest of the last two steps' walls) plus the final evaluation (as long as
the longest evaluation before training: the same cases, the same sampler) and, where finishing one more step
would overrun, training stops after this step: a `trainer.steps` choice whose value is the
steps trained. The automatic warm-up starts no chunk that would take it past
`recipe.warmup_budget_share` of the budget. Every time comes from one clock (`now`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .choices import Choice

RECENT_STEPS = 2  # the per-step estimate: the longest of this many last steps


def now() -> float:
    """The budget's clock (monotonic seconds)."""
    return time.monotonic()


@dataclass
class TimeBudget:
    """One run's budget; `started` is the run's start on `clock`."""

    minutes: float
    started: float
    clock: Callable[[], float] = field(default_factory=lambda: now)
    eval_s: float = 0.0  # the final evaluation's estimate: the longest evaluation's wall before training (0: none follows)
    step_walls: list[float] = field(default_factory=list)  # this process's training steps
    _step_ended: float | None = None

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    def elapsed(self) -> float:
        return self.clock() - self.started

    def training_starts(self) -> str | None:
        """Marks the first step's start; a loud line when the budget is spent already (the run
        still trains one step: a run that trains nothing is worth less than one that is late)."""
        self._step_ended = self.clock()
        elapsed = self.elapsed()
        if elapsed + self.eval_s < self.seconds:
            return None
        return (f"agentcore-rl recipe: !!! THE TIME BUDGET IS SPENT BEFORE TRAINING: {elapsed:.0f}s elapsed "
                f"(pre-evaluation, warm-up) + {self.eval_s:.0f}s for the final evaluation >= the budget of "
                f"{self.seconds:.0f}s (recipe.time_budget_min={self.minutes:g}); training ONE step, then "
                "stopping. Raise recipe.time_budget_min to train more.")

    def after_step(self, *, step: int, steps: int) -> Choice | None:
        """The choice to stop after `step` (of `steps`) when finishing one more would overrun;
        None to go on (or when `step` is the last anyway)."""
        ended = self.clock()
        self.step_walls.append(ended - (self._step_ended if self._step_ended is not None else self.started))
        self._step_ended = ended
        if step >= steps:
            return None
        elapsed = ended - self.started
        per_step = max(self.step_walls[-RECENT_STEPS:])
        if elapsed + per_step + self.eval_s <= self.seconds:
            return None
        return Choice("trainer.steps", step,
                      f"training stopped early for the time budget after {step} of trainer.steps={steps} steps: "
                      f"{elapsed:.0f}s elapsed + {per_step:.0f}s for one more step (the longest of the last "
                      f"{min(RECENT_STEPS, len(self.step_walls))}) + {self.eval_s:.0f}s for the final evaluation "
                      f"(the longest evaluation before training) > the budget of {self.seconds:.0f}s "
                      f"(recipe.time_budget_min={self.minutes:g})", at=f"step {step}")

    def room(self) -> tuple[float, float] | None:
        """(seconds left for training after the final evaluation's estimate, the last step's wall),
        for choices that make steps longer; None before the first step ends."""
        if not self.step_walls:
            return None
        return self.seconds - self.elapsed() - self.eval_s, self.step_walls[-1]

    def warm_up(self, share: float) -> "WarmUpShare":
        """The automatic warm-up's share of this budget, from now (its start)."""
        return WarmUpShare(self, share, started=self.clock())

    def observations(self) -> dict[str, float | list[float]]:
        """The numbers behind the choice, for recipe.json."""
        return {"minutes": self.minutes, "eval_s": round(self.eval_s, 3), "elapsed_s": round(self.elapsed(), 3),
                "step_walls_s": [round(wall, 3) for wall in self.step_walls]}


@dataclass
class WarmUpShare:
    """`spent()` before each warm-up chunk: why no more chunk starts (None: one may), when the
    warm-up so far plus one more chunk (the longest so far, its probe included) would take more
    than `share` of the budget."""

    budget: TimeBudget
    share: float
    started: float
    _asked: float | None = None
    _chunk_s: float = 0.0

    def spent(self) -> str | None:
        now = self.budget.clock()
        if self._asked is not None:
            self._chunk_s = max(self._chunk_s, now - self._asked)
        self._asked = now
        used, allowed = now - self.started, self.share * self.budget.seconds
        if used + self._chunk_s <= allowed:
            return None
        return (f"stopped at the time budget: the warm-up took {used:.0f}s, and one more chunk (~{self._chunk_s:.0f}s) "
                f"would take it past recipe.warmup_budget_share={self.share:g} of the budget of "
                f"{self.budget.seconds:.0f}s (recipe.time_budget_min={self.budget.minutes:g})")
