"""Tinker's built-in losses, per datum, from target logprobs and the datum's `loss_fn_inputs`.

Each returns the summed loss (a scalar tensor with grad) and extra per-token outputs; the caller
adds `logprobs` (the target tokens' logprobs under the current weights) to the outputs and sums
the losses into the `loss:sum` metric, as Tinker does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import BadRequest

PPO_CLIP_LOW = 0.8
PPO_CLIP_HIGH = 1.2


def _input(inputs: Mapping[str, np.ndarray], name: str, length: int, torch: Any, *, default: float | None = None):
    value = inputs.get(name)
    if value is None:
        if default is None:
            raise BadRequest(f"loss_fn_inputs has no {name!r}; this loss needs it (one value per target token)")
        return torch.full((length,), default, dtype=torch.float32)
    if value.shape != (length,):
        raise BadRequest(f"loss_fn_inputs[{name!r}] has shape {list(value.shape)}; expected [{length}] like target_tokens")
    return torch.from_numpy(np.asarray(value, dtype=np.float32))


def cross_entropy(logprobs, inputs, config, torch):
    weights = _input(inputs, "weights", len(logprobs), torch, default=1.0)
    elementwise = -logprobs * weights
    return elementwise.sum(), {"elementwise_loss": elementwise.detach()}


def importance_sampling(logprobs, inputs, config, torch):
    sampler_logprobs = _input(inputs, "logprobs", len(logprobs), torch)
    advantages = _input(inputs, "advantages", len(logprobs), torch)
    ratio = torch.exp(logprobs - sampler_logprobs)
    return -(ratio * advantages).sum(), {}


def ppo(logprobs, inputs, config, torch):
    sampler_logprobs = _input(inputs, "logprobs", len(logprobs), torch)
    advantages = _input(inputs, "advantages", len(logprobs), torch)
    low = _input(inputs, "clip_low_threshold", len(logprobs), torch,
                 default=float(config.get("clip_low_threshold", PPO_CLIP_LOW)))
    high = _input(inputs, "clip_high_threshold", len(logprobs), torch,
                  default=float(config.get("clip_high_threshold", PPO_CLIP_HIGH)))
    ratio = torch.exp(logprobs - sampler_logprobs)
    clipped = torch.minimum(torch.maximum(ratio, low), high)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    return -objective.sum(), {}


LOSSES: dict[str, Callable[..., Any]] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
}


def loss_function(name: str) -> Callable[..., Any]:
    try:
        return LOSSES[name]
    except KeyError:
        raise BadRequest(
            f"loss_fn {name!r} is not implemented by agentcore-rl tinker-server; use one of {sorted(LOSSES)}"
        ) from None
