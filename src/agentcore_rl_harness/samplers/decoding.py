"""Token drawing shared by every in-process decoder (`hf_local`, the Tinker server's `generate`).

Logprob contract: `log_softmax(logits / T)` in fp32 of the drawn token, taken BEFORE top-k /
top-p truncation (truncation only restricts which tokens can be drawn); T == 0 is greedy argmax
with logprobs at T = 1. One place, so the two decoders cannot drift apart.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import MissingDependencyError, SamplingError
from ..records import SamplingParams

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without the [local] extra
    raise MissingDependencyError(
        f"in-process decoding needs torch ({exc}); pip install 'agentcore-rl-harness[local]'"
    ) from exc


def validate_params(params: SamplingParams) -> None:
    """Refuse sampling parameters no decoder can honour, naming the bad value."""
    if params.max_tokens < 1:
        raise SamplingError(f"max_tokens must be at least 1, got {params.max_tokens}")
    if params.temperature < 0:
        raise SamplingError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise SamplingError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise SamplingError(f"top_k must be >= 0 (0 means off), got {params.top_k}")


def tempered_logprobs(logits: torch.Tensor, temperatures: torch.Tensor | float) -> torch.Tensor:
    """log_softmax(logits / T) in fp32 over the last axis; T == 0 counts as 1 (greedy)."""
    if isinstance(temperatures, torch.Tensor):
        scale = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures)).unsqueeze(-1)
    else:
        scale = temperatures or 1.0
    return torch.log_softmax(logits.float() / scale, dim=-1)


def draw(logprobs: torch.Tensor, params: SamplingParams, generator: Any) -> int:
    """Draw one token from a row of tempered logprobs, applying top-k / top-p as a restriction."""
    scores = logprobs
    if params.top_k and params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        outside = torch.cumsum(probs, dim=-1) - probs >= params.top_p
        outside[0] = False
        scores = scores.masked_fill(torch.zeros_like(outside).scatter(0, order, outside), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def is_plain(params: SamplingParams) -> bool:
    """Sampled without truncation: a whole batch of such rows can be drawn in one call."""
    return params.temperature > 0 and not params.top_k and params.top_p >= 1.0


def cache_arguments(model: Any) -> tuple[str, dict[str, Any]]:
    """The KV-cache argument name (`cache` since transformers 5.2x, else `past_key_values`) and
    `logits_to_keep=1` where the model takes it."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    parameters = inspect.signature(inner.forward).parameters
    cache_arg = "cache" if "cache" in parameters else "past_key_values"
    extra = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
    return cache_arg, extra
