"""GRPO as pure functions: group advantages, the failure policy, and the token-level policy loss.

No torch at import; `policy_loss` imports it when called. Every function here is small enough to
check by hand, and tests/trainers/test_grpo.py does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..records import Rollout, Status
from .base import StepMetrics, TrainGroup, TrainSample

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")
EXCLUDED_STATUSES = (Status.TIMEOUT, Status.AGENT_ERROR, Status.INFRA_ERROR, Status.TASK_ERROR,
                     Status.LIMIT_EXCEEDED, Status.JUDGE_ERROR)


@dataclass(frozen=True)
class GRPOConfig:
    """The `algo` config group (`algo=grpo`)."""

    kind: str = "grpo"
    normalize_std: bool = True
    """Divide centred rewards by the group's std (population); off = Dr. GRPO style."""
    std_eps: float = 1e-6
    """Added to the std before dividing."""
    clip_low: float = 0.2
    """PPO clip: the ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.28
    """PPO clip: above at 1 + clip_high (DAPO's clip-higher keeps rare good tokens learnable)."""
    tis_cap: float | None = None
    """Use truncated importance sampling with this cap instead of PPO clipping (see policy_loss)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty against the initial policy; 0 skips the reference pass."""
    aggregation: str = "token_mean"
    """How token losses become one number: one of AGGREGATIONS (see policy_loss)."""

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(
                f"algo.aggregation={self.aggregation!r} is not supported; valid choices: "
                f"{list(AGGREGATIONS)}"
            )
        if not (0 <= self.clip_low < 1) or self.clip_high < 0:
            raise ConfigError(
                f"algo.clip_low={self.clip_low} must be in [0, 1) and algo.clip_high="
                f"{self.clip_high} must be >= 0"
            )
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError(f"algo.tis_cap={self.tis_cap} must be > 0, or null for PPO clipping")
        if self.kl_coef < 0 or self.std_eps < 0:
            raise ConfigError(
                f"algo.kl_coef={self.kl_coef} and algo.std_eps={self.std_eps} must be >= 0"
            )


def group_advantages(rewards: Sequence[float], *, normalize_std: bool, eps: float = 1e-6) -> list[float]:
    """Each reward minus the group mean, optionally divided by (population std + eps)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centred = [reward - mean for reward in rewards]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(value * value for value in centred) / len(centred))
    return [value / (std + eps) for value in centred]


def training_reward(rollout: Rollout) -> float:
    """The reward a trainer sees: the task's reward, else 1.0 for success and 0.0 for failure."""
    if rollout.reward is not None:
        return float(rollout.reward)
    return 1.0 if rollout.success else 0.0


def groups_from_rollouts(rollouts: Sequence[Rollout]) -> tuple[list[TrainGroup], dict[str, int]]:
    """One group per `group_id`, in first-seen order, without the rollouts that cannot be scored.

    The one group builder (the harness's training loop, verl, slime and users' own loops). A
    timeout, agent_error or infra_error rollout is left out of its group and counted by status,
    never turned into a reward-0 sample: that would bias the advantages of the rollouts that did
    finish. A finished rollout without a task reward trains on `training_reward` (its success as
    1.0 / 0.0). Each sample is keyed `group_id/sample_index`; a group whose rollouts were all left
    out is not returned.
    """
    groups: dict[str, list[TrainSample]] = {}
    excluded: dict[str, int] = {}
    for rollout in rollouts:
        if rollout.status in EXCLUDED_STATUSES:
            excluded[rollout.status.value] = excluded.get(rollout.status.value, 0) + 1
            continue
        groups.setdefault(rollout.group_id, []).append(TrainSample(
            rollout_key=f"{rollout.group_id}/{rollout.sample_index}",
            reward=training_reward(rollout),
            traces=rollout.traces,
        ))
    return [TrainGroup(group_id, tuple(samples)) for group_id, samples in groups.items()], excluded


@dataclass(frozen=True)
class BatchItem:
    """One trace ready for the loss. `old_logprobs[i]` is 0.0 where `loss_mask[i]` is 0 (unused)."""

    group_id: str
    rollout_key: str
    token_ids: tuple[int, ...]
    prompt_length: int
    loss_mask: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    advantage: float
    policy_version: int | None
    """The oldest policy version this trace was sampled under (None if not recorded)."""

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class BatchStats:
    groups_total: int
    groups_used: int
    groups_skipped_small: int
    groups_skipped_constant: int
    rollouts_used: int
    traces_used: int
    traces_dropped_empty: int
    trained_tokens: int
    reward_mean: float | None
    reward_std: float | None
    advantage_abs_mean: float | None


def build_batch(
    groups: Sequence[TrainGroup], *, normalize_std: bool, eps: float = 1e-6
) -> tuple[list[BatchItem], BatchStats]:
    """Apply the failure policy and give every trained trace its rollout's advantage.

    The runner has already left out timeout / agent_error / infra_error rollouts. Here: a group
    with fewer than 2 samples or a constant reward teaches nothing and is skipped (counted); each
    rollout counts once in its group's statistics however many traces it forked into, and all
    its traces share its advantage; traces without a trained token are dropped (counted).
    """
    items: list[BatchItem] = []
    all_rewards: list[float] = []
    used_advantages: list[float] = []
    skipped_small = skipped_constant = groups_used = dropped_empty = 0
    for group in groups:
        rewards = [float(sample.reward) for sample in group.samples]
        all_rewards.extend(rewards)
        if len(rewards) < 2:
            skipped_small += 1
            continue
        if max(rewards) == min(rewards):
            skipped_constant += 1
            continue
        groups_used += 1
        advantages = group_advantages(rewards, normalize_std=normalize_std, eps=eps)
        used_advantages.extend(advantages)
        for sample, advantage in zip(group.samples, advantages):
            for trace in sample.traces:
                if not any(trace.loss_mask):
                    dropped_empty += 1
                    continue
                items.append(_item(group.group_id, sample.rollout_key, trace, advantage))
    stats = BatchStats(
        groups_total=len(groups),
        groups_used=groups_used,
        groups_skipped_small=skipped_small,
        groups_skipped_constant=skipped_constant,
        rollouts_used=len(used_advantages),
        traces_used=len(items),
        traces_dropped_empty=dropped_empty,
        trained_tokens=sum(item.trained_tokens for item in items),
        reward_mean=_mean(all_rewards),
        reward_std=_std(all_rewards),
        advantage_abs_mean=_mean([abs(value) for value in used_advantages]),
    )
    return items, stats


def staleness(items: Sequence[BatchItem], policy_version: int) -> list[int]:
    """Per trace: how many versions the trainer is ahead of the oldest one it was sampled under."""
    return [policy_version - item.policy_version for item in items if item.policy_version is not None]


def step_metrics(
    *, step: int, policy_version: int, stats: BatchStats, lags: Sequence[int], started: float, lr: float,
    loss: float | None = None, kl: float | None = None, sampler_kl: float | None = None,
    clip_fraction: float | None = None, grad_norm: float | None = None, sync_s: float | None = None,
) -> StepMetrics:
    """One `StepMetrics` from the batch statistics and what the update reported (None: nothing)."""
    return StepMetrics(
        step=step,
        policy_version=policy_version,
        loss=loss,
        kl=kl,
        sampler_kl=sampler_kl,
        clip_fraction=clip_fraction,
        trained_tokens=stats.trained_tokens,
        sequences=stats.traces_used,
        groups=stats.groups_used,
        groups_skipped=stats.groups_skipped_small + stats.groups_skipped_constant,
        reward_mean=stats.reward_mean,
        reward_std=stats.reward_std,
        advantage_abs_mean=stats.advantage_abs_mean,
        grad_norm=grad_norm,
        staleness_max=max(lags) if lags else None,
        staleness_mean=sum(lags) / len(lags) if lags else None,
        wall_time_s=time.perf_counter() - started,
        lr=lr,
        sync_s=sync_s,
    )


def _item(group_id: str, rollout_key: str, trace: Any, advantage: float) -> BatchItem:
    versions = trace.metadata.get("policy_versions") or ()
    return BatchItem(
        group_id=group_id,
        rollout_key=rollout_key,
        token_ids=tuple(trace.token_ids),
        prompt_length=trace.prompt_length,
        loss_mask=tuple(int(bool(mask)) for mask in trace.loss_mask),
        old_logprobs=tuple(
            float(logprob) if mask else 0.0 for mask, logprob in zip(trace.loss_mask, trace.logprobs)
        ),
        advantage=advantage,
        policy_version=min(int(version) for version in versions) if versions else None,
    )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    mean = _mean(values)
    if mean is None:
        return None
    return math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))


@dataclass(frozen=True)
class LossOutput:
    """The loss to backpropagate plus sums for metrics (summed, so micro-batches add up)."""

    loss: Any
    """A scalar tensor."""
    trained_tokens: int
    clipped_tokens: int
    kl_sum: float | None
    """Sum over trained tokens of the k3 KL to the reference (None without reference logprobs)."""
    sampler_kl_sum: float
    """Sum over trained tokens of the k3 KL to the sampler (old) logprobs."""


def policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float,
    clip_high: float,
    tis_cap: float | None,
    kl_coef: float,
    ref_logprobs: Any | None,
    aggregation: str = "token_mean",
    total_tokens: int | None = None,
    total_sequences: int | None = None,
) -> LossOutput:
    """The GRPO token loss on [batch, time] tensors (`advantages` is [batch], one per trace).

    ratio r = exp(logprobs - old_logprobs), with old_logprobs the sampler's recorded ones.
    - PPO (tis_cap None): token loss = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)); a
      token is "clipped" when the clipped term is the larger (its gradient is then zero).
    - Truncated IS (tis_cap c): token loss = -A r sg(min(r, c) / r), whose value is -A min(r, c)
      and whose gradient is min(r, c) A grad(logprobs): the policy gradient with the importance
      weight truncated at c. No token's gradient is dropped; "clipped" counts tokens with r > c.
      Use it when sampler and trainer disagree (bf16 sampling, stale batches).
    - KL (kl_coef > 0): + kl_coef * k3, k3 = exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased
      for KL(policy || reference) on policy samples, low variance).
    Aggregation over trained tokens (mask 1):
    - "token_mean" (default): sum of token losses / number of trained tokens in the whole batch.
      Every token weighs the same, so a long trace is neither diluted (as under
      seq_mean_token_mean, which lets long wrong answers escape their penalty) nor is the loss
      scale tied to trace length (as under seq_mean_token_sum, which makes the learning rate
      depend on how long the agent talks).
    - "seq_mean_token_mean": mean over traces of each trace's token mean (the original GRPO).
    - "seq_mean_token_sum": mean over traces of each trace's token sum.
    `total_tokens` / `total_sequences` are the whole step's counts when this call sees one
    micro-batch, so the micro-batch losses add up to exactly the full-batch loss.
    """
    import torch

    from .ratios import k3

    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation {aggregation!r} is not one of {list(AGGREGATIONS)}")
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    if tis_cap is None:
        unclipped = -adv * ratio
        clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        token_loss = torch.maximum(unclipped, clipped)
        clipped_now = (clipped > unclipped) & (mask > 0)
    else:
        weight = (torch.clamp(ratio, max=tis_cap) / ratio).detach()
        token_loss = -adv * ratio * weight
        clipped_now = (ratio > tis_cap) & (mask > 0)
    kl_sum = None
    if ref_logprobs is not None:
        reference_k3 = k3((ref_logprobs - logprobs) * mask)
        kl_sum = float((reference_k3 * mask).sum().detach())
        if kl_coef > 0:
            token_loss = token_loss + kl_coef * reference_k3
    elif kl_coef > 0:
        raise ValueError("kl_coef > 0 needs ref_logprobs (the reference policy's logprobs)")
    sampler_k3 = k3(-log_ratio)
    token_loss = token_loss * mask
    per_sequence_tokens = mask.sum(-1)
    n_tokens = int(per_sequence_tokens.sum().item())
    n_sequences = int(mask.shape[0])
    if aggregation == "token_mean":
        loss = token_loss.sum() / (total_tokens or max(n_tokens, 1))
    elif aggregation == "seq_mean_token_mean":
        per_sequence = token_loss.sum(-1) / per_sequence_tokens.clamp(min=1)
        loss = per_sequence.sum() / (total_sequences or max(n_sequences, 1))
    else:
        loss = token_loss.sum() / (total_sequences or max(n_sequences, 1))
    return LossOutput(
        loss=loss,
        trained_tokens=n_tokens,
        clipped_tokens=int(clipped_now.sum().item()),
        kl_sum=kl_sum,
        sampler_kl_sum=float((sampler_k3 * mask).sum().detach()),
    )
