"""Supervised warm-up on the `Trainer` seam: cross-entropy on demonstration traces.

A demonstration is a `Trace` whose `loss_mask` is 1 on the assistant's tokens (a teacher-forced
oracle episode, a recorded successful rollout, or a rendered conversation). A trainer that can
warm up has `sft_step(traces, lr=None) -> SFTMetrics` (one optimizer step on the mean token
negative log-likelihood of the masked tokens) and `sft_loss(traces) -> float` (the same loss,
no update). Trainers without them are refused by `require_sft` with a clear message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..records import Trace
from .grpo import BatchItem


@dataclass(frozen=True)
class SFTMetrics:
    """One warm-up step; one line of `train/warmup.jsonl`."""

    step: int
    """Warm-up steps taken so far, this one included."""
    policy_version: int
    """The policy version after the step."""
    loss: float
    """Mean negative log-likelihood per trained token, before the update."""
    trained_tokens: int
    sequences: int
    grad_norm: float | None
    lr: float
    wall_time_s: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def require_sft(kind: str) -> None:
    """Refuse a warm-up on a trainer kind that has no supervised step (yet): `registry.py`."""
    from .registry import spec_for

    if not spec_for(kind).sft:
        raise ConfigError(
            f"warmup.enabled=true needs a trainer with a supervised step; trainer={kind} has none "
            "yet (trainer=local has one); set warmup.enabled=false or use trainer=local")


def trained_traces(traces: Sequence[Trace]) -> list[Trace]:
    """The traces with at least one trained token and a token of context before it."""
    return [t for t in traces if t.prompt_length >= 1 and any(t.loss_mask)]


def mean_nll(rows: Sequence[Sequence[float | None]]) -> tuple[float, int]:
    """(mean negative log-likelihood, token count) over the non-None logprobs of `rows`."""
    values = [v for row in rows for v in row if v is not None]
    if not values:
        raise ValueError("no trained tokens in the demonstrations: nothing to warm up on")
    loss = -sum(values) / len(values)
    if not math.isfinite(loss):
        raise ValueError(f"the warm-up loss is {loss}: the model gives a demonstration token probability 0")
    return loss, len(values)


def plain_items(traces: Sequence[Trace]) -> list[BatchItem]:
    """Traces as batch items with no advantage (for a supervised loss or a logprob pass)."""
    return [
        BatchItem(group_id="", rollout_key=str(index), token_ids=tuple(trace.token_ids),
                  prompt_length=trace.prompt_length,
                  loss_mask=tuple(int(bool(mask)) for mask in trace.loss_mask),
                  old_logprobs=(0.0,) * len(trace.loss_mask), advantage=0.0, policy_version=None)
        for index, trace in enumerate(traces)
    ]
