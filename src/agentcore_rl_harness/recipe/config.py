"""The `recipe` node (conf/recipe/auto.yaml, none.yaml): whether the run chooses for itself, and
the bounds of each choice. Every choice yields to an explicit config key (`explicit.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

RECIPE_KINDS = ("auto", "none")


@dataclass(frozen=True)
class RecipeConfig:
    """The `recipe` group (recipe=auto | none): run / train modes choose dtypes, max_tokens, LoRA rank and lr, a warm-up, group sizes and, under a time budget, the steps trained from what they observe ([Recipe](../recipe.md))."""

    kind: str = "auto"  # auto: choose from what the run observes (run / train modes); none: the config as written
    dtype_min_params: int = 20_000_000  # smaller models train in float32 without measuring (dtype cannot matter)
    dtype_min_speedup: float = 1.3  # bf16 only where the start-up benchmark measures it this much faster
    max_tokens_margin: float = 1.5  # sampling.max_tokens = the oracle's longest turn x this (rounded up to 16)
    probe_rows: int = 8  # train rows rolled out to measure base success (and the warm-up's progress)
    base_success_floor: float = 0.05  # a probe success at or below this is "~0": warm up from the oracle
    warmup_threshold: float = 0.5  # the automatic warm-up stops once probe success reaches this
    warmup_chunk_steps: int = 4  # supervised steps between two probes of the automatic warm-up
    warmup_max_steps: int = 24  # the automatic warm-up's bound, reached or not
    warmup_demonstrations: int = 32  # oracle demonstrations it trains on (warmup.max_demonstrations wins)
    informative_min: float = 0.5  # below this fraction of informative groups, the next steps sample more
    max_group_size: int = 16  # how far `algo.group_size` may be raised
    kl_probe_traces: int = 4  # first-step traces whose tokens measure KL to the initial policy (0: off)
    time_budget_min: float | None = None  # the run's wall-time budget in minutes: training stops when one more step would overrun it (null: no budget)
    warmup_budget_share: float = 0.5  # under a time budget, the automatic warm-up starts no chunk that would take it past this share of it

    def validate(self) -> None:
        if self.kind not in RECIPE_KINDS:
            raise ConfigError(f"recipe={self.kind!r} is not a recipe; valid choices: {list(RECIPE_KINDS)} "
                              "(auto: choices from what the run observes; none: the config as written)")
        for name in ("base_success_floor", "warmup_threshold", "informative_min", "warmup_budget_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ConfigError(f"recipe.{name}={value} must be a fraction between 0 and 1")
        for name in ("probe_rows", "warmup_chunk_steps", "warmup_max_steps", "warmup_demonstrations",
                     "max_group_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"recipe.{name}={getattr(self, name)} must be >= 1")
        if self.max_tokens_margin < 1 or self.dtype_min_speedup <= 0 or self.kl_probe_traces < 0:
            raise ConfigError(f"recipe.max_tokens_margin={self.max_tokens_margin} must be >= 1, "
                              f"recipe.dtype_min_speedup={self.dtype_min_speedup} > 0 and "
                              f"recipe.kl_probe_traces={self.kl_probe_traces} >= 0")
        if self.time_budget_min is not None and not self.time_budget_min > 0:
            raise ConfigError(f"recipe.time_budget_min={self.time_budget_min} must be a number of minutes > 0 "
                              "(e.g. recipe.time_budget_min=20), or null for no budget")
        if self.time_budget_min is not None and self.kind != "auto":
            raise ConfigError(f"recipe.time_budget_min={self.time_budget_min} is set but recipe={self.kind} chooses "
                              "nothing: use recipe=auto (the default of run and train modes) or drop the budget")
