"""Importance ratios and the k3 KL estimate, the one definition every trainer uses.

k3(delta) = exp(delta) - delta - 1 with delta = log q - log p is >= 0 and an unbiased,
low-variance estimate of KL(p || q) on samples from p (Schulman's k3). It measures the policy
against the reference (`algo.kl_coef`) and against the sampler that drew the tokens
(`sampler_kl`, how off-policy a batch is). Works on floats and on torch tensors alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LOSS_FNS = ("importance_sampling", "ppo", "cispo")


def k3(delta: Any) -> Any:
    """exp(delta) - delta - 1, elementwise on a tensor or on one float."""
    exp = delta.exp() if hasattr(delta, "exp") else math.exp(delta)
    return exp - delta - 1.0


def is_clipped(
    ratio: float, advantage: float, *, loss_fn: str, clip_low: float, clip_high: float,
    tis_cap: float | None,
) -> bool:
    """Whether one token's gradient is clipped: under PPO when the clipped term is the larger,
    under CISPO when the ratio exceeds the cap; importance sampling clips nothing."""
    if loss_fn == "ppo":
        bounded = min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
        return -advantage * bounded > -advantage * ratio
    if loss_fn == "cispo":
        return tis_cap is not None and ratio > tis_cap
    return False


@dataclass(frozen=True)
class LogprobStats:
    """What the policy logprobs returned by a service's forward pass say about the batch."""

    sampler_kl: float | None
    clip_fraction: float | None


def logprob_stats(
    data: Sequence[Any], policy_logprobs: Sequence[Sequence[float]] | None, *,
    loss_fn: str, clip_low: float = 0.2, clip_high: float = 0.2, tis_cap: float | None = None,
) -> LogprobStats:
    """Mean k3 KL(policy || sampler) and the clipped fraction over trained tokens.

    `data` are `datum.TokenDatum`s (their `mask`, `logprobs` and `advantages` are read).

    None (both) when the service returned no per-token logprobs or their shape does not match
    the data; clip_fraction is None for importance_sampling, which clips nothing.
    """
    if policy_logprobs is None or len(policy_logprobs) != len(data):
        return LogprobStats(None, None)
    kl_sum, clipped, tokens = 0.0, 0, 0
    for datum, values in zip(data, policy_logprobs):
        if values is None or len(values) != len(datum.mask):
            return LogprobStats(None, None)
        for mask, old, new, advantage in zip(datum.mask, datum.logprobs, values, datum.advantages):
            if not mask:
                continue
            kl_sum += k3(float(old) - float(new))
            clipped += is_clipped(math.exp(float(new) - float(old)), advantage, loss_fn=loss_fn,
                                  clip_low=clip_low, clip_high=clip_high, tis_cap=tis_cap)
            tokens += 1
    if not tokens:
        return LogprobStats(None, None)
    return LogprobStats(kl_sum / tokens, None if loss_fn == "importance_sampling" else clipped / tokens)
