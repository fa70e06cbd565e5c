"""Attention in fp32 for a model whose weights are bfloat16 / float16, when the in-process sampler
serves it.

On a CPU without native bfloat16 (AVX2), a bfloat16 SmolLM2-135M decode step's matmuls take half
the fp32 time (they read half the bytes), but torch's CPU flash attention in bfloat16 is ~4x
slower than in fp32: a 16-row step over 800 tokens took 338 ms against 176 ms in fp32
(bench/RESULTS.md: "Where a decode step goes"). So the sampler keeps the KV cache in fp32 (`_kv.Float32Layer`)
and runs attention in fp32: the query is cast up, transformers' own SDPA attention runs, and its
output is cast back to the model's dtype for `o_proj`. Without a cache (a training forward, where
keys are the model's own dtype) nothing is cast and this is plain SDPA.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "agentcore_rl_sdpa_fp32"
_registered = False


def _sdpa_fp32(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    output, weights = sdpa_attention_forward(module, query.to(key.dtype), key, value, attention_mask, **kwargs)
    return output.to(query.dtype), weights


def low_precision(model: Any) -> bool:
    """True when the model's parameters are bfloat16 / float16 (the sampler then serves it in fp32
    attention with an fp32 KV cache)."""
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return parameter is not None and parameter.dtype in (torch.bfloat16, torch.float16)


def use_fp32_attention(model: Any) -> None:
    """Switch a low-precision transformers model to fp32 SDPA attention (in place; idempotent).
    Models whose attention is not SDPA (eager, flex, a kernel) are left as they are."""
    global _registered
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", NAME):
        return
    if not _registered:
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask

        AttentionInterface.register(NAME, _sdpa_fp32)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    if config._attn_implementation != NAME:
        model.set_attn_implementation(NAME)
