"""Sampling for the Tinker server: `num_samples` continuations of one prompt, with logprobs.

Logprob contract (the harness's, see `samplers/hf_local.py`): log_softmax(logits / T) of the
drawn token in fp32, before top-k / top-p truncation; T == 0 is greedy with logprobs at T = 1.
A stop token ends a sequence and is included in its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..records import SamplingParams
from ..samplers.decoding import cache_arguments, draw, is_plain, tempered_logprobs
from .wire import SampledSequence, SampleOutput


@dataclass(frozen=True)
class SampleSpec:
    """What one `asample` asks for, already validated."""

    prompt: tuple[int, ...]
    num_samples: int
    max_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    prompt_logprobs: bool = False


def prompt_logprobs(model: Any, prompt: Sequence[int]) -> tuple[float, ...]:
    """log p(prompt[i] | prompt[:i]) at temperature 1; NaN for the first token."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt)])).logits[0, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(prompt[1:]).unsqueeze(-1)).squeeze(-1)
    return (float("nan"), *picked.tolist())


def sample(model: Any, spec: SampleSpec, *, decode: Any) -> SampleOutput:
    """Run the decode loop for every row at once (rows that finished keep decoding, ignored)."""
    generator = torch.Generator()
    generator.manual_seed(spec.seed if spec.seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    params = SamplingParams(temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
                            max_tokens=spec.max_tokens)
    rows = spec.num_samples
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    reasons: list[str | None] = [None] * rows
    cache_kwargs = _cache_kwargs(model)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(spec.prompt)] * rows), **cache_kwargs).logits
        for _ in range(spec.max_tokens):
            scaled = tempered_logprobs(logits[:, -1], spec.temperature)
            if spec.temperature == 0:
                drawn = torch.argmax(scaled, dim=-1).tolist()
            elif is_plain(params):
                drawn = torch.multinomial(scaled.exp(), 1, generator=generator).squeeze(-1).tolist()
            else:
                drawn = [draw(scaled[row], params, generator) for row in range(rows)]
            for row, token in enumerate(drawn):
                if reasons[row] is not None:
                    continue
                tokens[row].append(token)
                logprobs[row].append(float(scaled[row, token]))
                if token in spec.stop_token_ids or _hits_stop_string(decode, tokens[row], spec.stop_strings):
                    reasons[row] = "stop"
            if all(reason is not None for reason in reasons):
                break
            logits = model(input_ids=torch.tensor(drawn).unsqueeze(-1), **cache_kwargs).logits
    sequences = tuple(SampledSequence(tuple(t), tuple(lp), reason or "length")
                      for t, lp, reason in zip(tokens, logprobs, reasons))
    return SampleOutput(sequences, prompt_logprobs(model, spec.prompt) if spec.prompt_logprobs else None)


def _cache_kwargs(model: Any) -> dict[str, Any]:
    """A fresh KV cache, updated in place, under the argument name this transformers uses."""
    from transformers import DynamicCache

    name, extra = cache_arguments(model)
    return {name: DynamicCache(), "use_cache": True, **extra}


def _hits_stop_string(decode: Any, row_tokens: list[int], stop_strings: tuple[str, ...]) -> bool:
    if not stop_strings:
        return False
    text = decode(row_tokens[-32:])
    return any(stop in text for stop in stop_strings)
