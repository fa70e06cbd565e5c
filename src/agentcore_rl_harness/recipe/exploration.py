"""Between steps: when too few GRPO groups teach anything, the next steps sample more per group.

A group teaches only when its samples' rewards differ. When the informative fraction of a step
falls below `recipe.informative_min` while most samples fail, a larger group gives each row more
chances of one success to learn from: `algo.group_size` doubles, up to `recipe.max_group_size`.
Groups that are constant because every sample succeeded are left alone (the rows are learned).
The temperature is not raised: the trainer recomputes logprobs at one fixed temperature.

Under a time budget a larger group makes each step longer (its rollouts and its update grow with
it): the group grows only where the budget leaves room for at least two steps of the larger size
(this step's wall scaled by the growth). Otherwise the run keeps fewer, cheaper steps, and says so
once (on office 1m under 20 minutes, groups raised 4 -> 16 made one step 458 s of a 1200 s run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .choices import Choice
from .config import RecipeConfig


@dataclass(frozen=True)
class Adaptation:
    """What a step's adapter adds to its steps.jsonl line, the group size from now on, and
    whether training stops after this step (the time budget's choice)."""

    fields: dict[str, Any] = field(default_factory=dict)
    group_size: int | None = None  # None: unchanged
    stop: bool = False  # True: this step is the last (it is checkpointed)


class Exploration:
    def __init__(self, recipe: RecipeConfig, *, group_size: int, explicit: bool) -> None:
        self.recipe, self.group_size, self.explicit = recipe, group_size, explicit
        self._said_explicit = False
        self._said_budget = False

    def after_step(self, line: dict[str, Any], *, room: tuple[float, float] | None = None) -> Choice | None:
        """The choice this step's line calls for (None: none). `room`: under a time budget, (the
        seconds it leaves for training, this step's wall)."""
        fraction, success = line.get("informative_fraction"), line.get("success_rate")
        if fraction is None or fraction >= self.recipe.informative_min:
            return None
        if success is not None and success >= 0.5:
            return None
        wanted = min(self.recipe.max_group_size, self.group_size * 2)
        if wanted == self.group_size:
            return None
        reason = (f"step {line['step']}: {fraction:.0%} of groups informative (< recipe.informative_min="
                  f"{self.recipe.informative_min}), success {_percent(success)}: more samples per row "
                  f"give GRPO a chance of a differing reward (bound recipe.max_group_size={self.recipe.max_group_size})")
        at = f"step {line['step']}"
        if room is not None and not self.explicit:
            left, wall = room
            needed = 2 * wall * wanted / self.group_size
            if needed > left:
                if self._said_budget:
                    return None
                self._said_budget = True
                return Choice("algo.group_size", self.group_size,
                              f"kept for the time budget: two steps at group size {wanted} would take ~{needed:.0f}s "
                              f"(this step {wall:.0f}s x {wanted / self.group_size:g} x 2) and the budget leaves "
                              f"{max(left, 0):.0f}s for training (the recipe would choose {wanted}: {reason})",
                              applied=False, at=at)
        if self.explicit:
            if self._said_explicit:
                return None
            self._said_explicit = True
            return Choice("algo.group_size", self.group_size,
                          f"set explicitly (the recipe would choose {wanted}: {reason})", applied=False, at=at)
        self.group_size = wanted
        return Choice("algo.group_size", wanted, reason, at=at)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
