"""Traces -> next-token training examples, shared by every adapter that ships tokens elsewhere.

`grpo.build_batch` decides what is trained (failure policy, group advantages, forked rollouts,
empty traces); this module only changes the layout. A trace of N tokens becomes one example
whose inputs are the first N-1 tokens and whose targets are the last N-1 (the layout of
`tinker.Datum` and of SageMaker Training Sessions):

    token_ids   t0 t1 t2 t3 t4 t5          prompt_length = 3, loss_mask 0 0 0 1 1 0 ... per token
    input       t0 t1 t2 t3 t4
    target         t1 t2 t3 t4 t5
    mask            0  0  1  1  0          mask[i] = loss_mask[i + 1]
    logprobs        0  0 l3 l4  0          the sampler's logprob of target i (0 where mask is 0)
    advantages      0  0  A  A  0          the rollout's advantage where mask is 1, else 0

The first token is never a target (it has no context), which is why a trace whose first token
carries loss is rejected: no sampler produces one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .grpo import BatchItem


@dataclass(frozen=True)
class TokenDatum:
    """One trace as a next-token example; every per-token tuple has `len(input_tokens)` entries."""

    group_id: str
    rollout_key: str
    prompt_length: int
    """Tokens of the trace's first prompt (the prompt/response split of the trace)."""
    input_tokens: tuple[int, ...]
    target_tokens: tuple[int, ...]
    mask: tuple[float, ...]
    logprobs: tuple[float, ...]
    advantages: tuple[float, ...]
    advantage: float
    """The rollout's advantage (every trained token carries it)."""

    @property
    def trained_tokens(self) -> int:
        return int(sum(self.mask))


def token_datum(item: BatchItem) -> TokenDatum:
    """Shift one `BatchItem` into input/target layout (see the module docstring)."""
    if len(item.token_ids) < 2:
        raise ValueError(f"trace of rollout {item.rollout_key!r} has {len(item.token_ids)} token(s); need 2+")
    if item.loss_mask[0]:
        raise ValueError(f"trace of rollout {item.rollout_key!r} trains its first token, which has no context")
    mask = tuple(float(m) for m in item.loss_mask[1:])
    return TokenDatum(
        group_id=item.group_id,
        rollout_key=item.rollout_key,
        prompt_length=item.prompt_length,
        input_tokens=item.token_ids[:-1],
        target_tokens=item.token_ids[1:],
        mask=mask,
        logprobs=tuple(lp if m else 0.0 for lp, m in zip(item.old_logprobs[1:], mask)),
        advantages=tuple(item.advantage if m else 0.0 for m in mask),
        advantage=item.advantage,
    )


def token_data(items: Sequence[BatchItem]) -> list[TokenDatum]:
    return [token_datum(item) for item in items]
