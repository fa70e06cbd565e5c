"""The `Trainer` seam: groups of scored rollouts in, one policy update and its metrics out.

The runner forms one `TrainGroup` per dataset row (the samples of that row) after applying the
failure policy (timeout / agent_error / infra_error rollouts are left out, never scored 0);
`grpo.build_batch` does the rest (small and constant groups, forked rollouts, empty traces).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError
from ..records import Trace


@dataclass(frozen=True)
class TrainSample:
    """One scored rollout. A rollout that forked has several traces; they share its advantage."""

    rollout_key: str
    reward: float
    traces: tuple[Trace, ...]


@dataclass(frozen=True)
class TrainGroup:
    """The scored rollouts of one dataset row: the unit GRPO centres rewards within."""

    group_id: str
    samples: tuple[TrainSample, ...]


@dataclass(frozen=True)
class StepMetrics:
    """What one trainer step did; one line of `train/steps.jsonl` (the runner adds its phases).

    Loss-side values are None when the step trained nothing (every group was skipped): the
    weights did not change, and no number is made up for them.
    """

    step: int
    """Trainer steps taken so far, this one included (1 after the first step)."""
    policy_version: int
    """The policy version after this step (bumped only when the weights changed)."""
    loss: float | None
    """The aggregated policy loss (plus KL penalty) before the update."""
    kl: float | None
    """k3 estimate of KL(policy || reference) on trained tokens; None when kl_coef is 0."""
    sampler_kl: float | None
    """k3 estimate of KL(policy || sampler) on trained tokens: ~0 when on-policy and aligned."""
    clip_fraction: float | None
    """Fraction of trained tokens whose ratio was clipped (PPO) or truncated (TIS)."""
    trained_tokens: int
    """Tokens with loss_mask 1 that entered the loss."""
    sequences: int
    """Traces that entered the loss."""
    groups: int
    """Groups that entered the loss."""
    groups_skipped: int
    """Groups left out: fewer than 2 samples or constant reward."""
    reward_mean: float | None
    """Mean reward over every sample handed to the step (skipped groups included)."""
    reward_std: float | None
    """Population std of those rewards."""
    advantage_abs_mean: float | None
    """Mean |advantage| over the rollouts that entered the loss (each rollout once)."""
    grad_norm: float | None
    """Gradient norm before clipping."""
    staleness_max: int | None
    """Largest lag between the trainer's version and the oldest version a trace was sampled under."""
    staleness_mean: float | None
    """Mean of that lag over traces that record `policy_versions`."""
    wall_time_s: float
    """Wall time of the step, including waiting for the sampler lock and the weight sync."""
    lr: float
    """The learning rate used for this step."""
    sync_s: float | None = None
    """Seconds the weight sync to the sampler took (a LoRA push or a full reload to vLLM, the
    in-process sampler's swap); None when the step synced nothing or the trainer does not time it."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class TrainerNode:
    """Base of every `trainer=<kind>` config node (`registry.py`); its optional checks default here."""

    def check_algo(self, algo: Any) -> None:
        """Reject, when the config is composed, `algo` settings this trainer cannot honour
        (`config.build_trainer_section`). Default: it honours them all."""


class WeightSink(Protocol):
    """What the trainer hands its weights to (the in-process sampler, `samplers/hf_local.py`; a
    vLLM server's policy, `samplers/vllm_policy.py`)."""

    lock: Any  # held while the trainer writes weights the sink may be reading

    def publish_weights(self, model: Any, *, policy_version: int) -> None:
        """Serve `model` from now on (it may land after the rows in flight end)."""

    def settle(self) -> None:
        """Return once the last published weights are in use (the buffer left behind is free)."""


@runtime_checkable
class Trainer(Protocol):
    """Takes groups of traces with rewards, updates the policy, hands the sampler new weights.

    Implementations subclass it: the optional capabilities are default methods (no supervised
    step, nothing to release), so callers never probe for them. `fake.RecordingTrainer` is the
    recording stand-in for tests."""

    policy_version: int

    async def step(self, *, groups: Sequence[TrainGroup]) -> StepMetrics: ...

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None: ...

    def load_checkpoint(self, path: str | os.PathLike[str]) -> int:
        """Restore a checkpoint written by `save_checkpoint`; return the step it was taken at."""
        ...

    def sft_step(self, traces: Sequence[Trace], *, lr: float | None = None) -> Any:
        """One supervised step (`sft.py`: mean token NLL of the masked tokens) -> `SFTMetrics`;
        a trainer without one refuses (`trainers/registry.py` marks the kinds that have it)."""
        raise ConfigError(f"{type(self).__name__} has no supervised warm-up step; set "
                          "warmup.enabled=false or use trainer=local")

    def sft_loss(self, traces: Sequence[Trace]) -> float:
        """The supervised loss of `traces`, no update (see `sft_step`)."""
        raise ConfigError(f"{type(self).__name__} has no supervised loss; set warmup.enabled=false "
                          "or use trainer=local")

    def compute_logprobs(self, traces: Sequence[Trace]) -> list[tuple[float | None, ...]] | None:
        """Logprobs of each trace's trained tokens under the current policy (None elsewhere), for
        `recipe/initial_kl.py`; default None: this trainer cannot (the KL is then not reported)."""
        return None

    def close(self) -> None:
        """Release what the trainer holds (a service trainer's billed session); default: nothing."""
        return None
