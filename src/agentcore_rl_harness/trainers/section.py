"""The `trainer` and `algo` nodes: the training loop's keys (`TrainLoopConfig`), plus the typed
node of the chosen trainer kind (`registry.py`) and algorithm; keys of another trainer kind are
left out with a warning (a project config for one kind must not stop a switch to another)."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from dataclasses import dataclass
from typing import Any

from ..config_schema import build
from ..errors import ConfigError, ConfigWarning


# Keys of the `trainer` node that drive the training loop (the rest configure the trainer).
LOOP_KEYS = ("steps", "batch_rows", "checkpoint_every", "overlap_rollouts", "mode")
# Keys of the `algo` node that the runner uses (the rest configure the algorithm).
GROUP_KEYS = ("group_size", "max_staleness", "stragglers", "min_group_fraction")
TRAIN_MODES = ("sync", "async")
STRAGGLER_POLICIES = ("wait", "drop", "partial")


@dataclass(frozen=True)
class TrainLoopConfig:
    """The training loop (train / run modes): keys of the `trainer` node, plus `algo.group_size`."""

    steps: int = 20  # trainer steps
    batch_rows: int = 4  # train rows per step (one GRPO group each)
    checkpoint_every: int = 5  # steps between checkpoints (the last step always checkpoints)
    group_size: int | None = None  # algo.group_size: samples per train row; null = the task's `samples`
    # true: the next step's rollouts start while this step's update runs (one step off-policy: the
    # importance ratio against the sampler's recorded logprobs corrects for it); false: each step
    # rolls out with the newest policy
    overlap_rollouts: bool = False
    # sync: each step rolls out its batch and trains on it; async: rollouts start continuously up
    # to runtime.concurrency and a step trains as soon as batch_rows complete groups are ready
    # (docs/async.md)
    mode: str = "sync"
    # algo.max_staleness (async): a sample is trained at most this many policy versions after the
    # oldest version that sampled one of its turns
    max_staleness: int = 2
    # algo.stragglers (async): wait = no step leaves a live rollout more than max_staleness behind
    # (the trainer waits for it); drop = never wait, a sample found too stale is dropped and counted;
    # partial = as wait, but a step that would wait for stragglers trains the groups' finished
    # samples instead and stops (and counts) the stragglers (docs/async.md)
    stragglers: str = "wait"
    # algo.min_group_fraction (stragglers=partial): the share of a group's samples (and at least 2)
    # that must have finished for the group to train without its stragglers
    min_group_fraction: float = 0.5


@dataclass(frozen=True)
class TrainerSection:
    """The `trainer` and `algo` groups: the loop, plus each implementation's typed config."""

    loop: TrainLoopConfig
    trainer: Any  # e.g. trainers.local.LocalTrainerConfig
    algo: Any  # e.g. trainers.grpo.GRPOConfig
    dropped: tuple[str, ...] = ()  # `trainer` keys of another trainer kind, left out (scoping)


def foreign_trainer_keys(kind: str, keys: typing.Iterable[str]) -> list[str]:
    """Of `keys` the chosen trainer `kind` does not have, those another kind has (`trainer.lr`
    of the in-process trainers under `trainer=verl`): a project config's settings for one kind
    must not stop a switch to another. Keys no kind has stay errors (a typo)."""
    from .registry import TRAINERS

    own = {f.name for f in dataclasses.fields(TRAINERS[kind].load_config_class())}
    unknown = [key for key in keys if key not in own]
    if not unknown:
        return []
    others: set[str] = set()
    for other, spec in TRAINERS.items():
        if other != kind:
            others.update(f.name for f in dataclasses.fields(spec.load_config_class()))
    return [key for key in unknown if key in others]


def dropped_keys_message(section: TrainerSection | None) -> str | None:
    """What the config left out when it built `section` (None: nothing)."""
    if section is None or not section.dropped:
        return None
    return _dropped_text(section.trainer.kind, section.dropped)


def _dropped_text(kind: str, keys: typing.Sequence[str]) -> str:
    named = ", ".join(f"trainer.{key}" for key in keys)
    return (f"trainer={kind} has no {named}: a setting of another trainer kind, ignored "
            f"(it applies again when that trainer is chosen)")


def algo_classes() -> dict[str, type]:
    from .grpo import GRPOConfig

    return {"grpo": GRPOConfig}


def _check_async(loop: TrainLoopConfig) -> None:
    """The async keys: a known mode and straggler policy, a staleness bound >= 0, no overlap."""
    if loop.mode not in TRAIN_MODES:
        raise ConfigError(f"trainer.mode={loop.mode!r} is not a training mode; valid choices: {list(TRAIN_MODES)}")
    if loop.stragglers not in STRAGGLER_POLICIES:
        raise ConfigError(f"algo.stragglers={loop.stragglers!r} is not a straggler policy; valid "
                          f"choices: {list(STRAGGLER_POLICIES)}")
    if not 0 < loop.min_group_fraction <= 1:
        raise ConfigError(f"algo.min_group_fraction={loop.min_group_fraction} must be in (0, 1] (the share of "
                          "a group's samples that must finish before algo.stragglers=partial trains it)")
    if loop.max_staleness < 0:
        raise ConfigError(f"algo.max_staleness={loop.max_staleness} must be >= 0 (0: every sample is "
                          "trained by the version that sampled it)")
    if loop.mode == "async" and loop.overlap_rollouts:
        raise ConfigError("trainer.mode=async already overlaps rollouts with updates; set "
                          "trainer.overlap_rollouts=false (or trainer.mode=sync)")


def build_trainer_section(trainer: dict[str, Any], algo: dict[str, Any]) -> TrainerSection:
    trainer_kind, algo_kind = trainer.get("kind", "local"), algo.get("kind", "grpo")
    from .registry import spec_for

    trainer_spec, algos = spec_for(str(trainer_kind)), algo_classes()
    if algo_kind not in algos:
        raise ConfigError(f"algo={algo_kind!r} is not available; valid choices: {sorted(algos)}")
    loop_values = {k: trainer[k] for k in LOOP_KEYS if k in trainer}
    loop_values.update({k: algo[k] for k in GROUP_KEYS if k in algo})
    loop = build(TrainLoopConfig, loop_values, "trainer")
    impl_class = trainer_spec.load_config_class()
    for key in ("steps", "batch_rows", "checkpoint_every"):
        if getattr(loop, key) < 1:
            raise ConfigError(f"trainer.{key}={getattr(loop, key)} must be >= 1")
    if loop.group_size is not None and loop.group_size < 2:
        raise ConfigError(f"algo.group_size={loop.group_size} must be >= 2 (GRPO compares samples)")
    _check_async(loop)
    impl_values = {k: v for k, v in trainer.items() if k not in LOOP_KEYS}
    dropped = foreign_trainer_keys(str(trainer_kind), impl_values)
    if dropped:
        warnings.warn(_dropped_text(str(trainer_kind), dropped), ConfigWarning, stacklevel=2)
    impl = build(impl_class, {k: v for k, v in impl_values.items() if k not in dropped},
                 "trainer", extra_valid=LOOP_KEYS, note=f" (trainer={trainer_kind})")
    algo_cfg = build(algos[algo_kind], {k: v for k, v in algo.items() if k not in GROUP_KEYS},
                     "algo", extra_valid=GROUP_KEYS, note=f" (algo={algo_kind})")
    impl.check_algo(algo_cfg)  # service trainers reject knobs they cannot honour
    return TrainerSection(loop=loop, trainer=impl, algo=algo_cfg, dropped=tuple(dropped))
