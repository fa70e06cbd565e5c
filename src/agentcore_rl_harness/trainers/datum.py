"""Traces -> next-token training examples, shared by every adapter that ships tokens elsewhere.

`grpo.build_batch` decides what is trained (failure policy, group advantages, forked rollouts,
empty traces); this module only changes the layout. A trace of N tokens becomes one example
whose inputs are the first N-1 tokens and whose targets are the last N-1 (the layout of
`tinker.Datum` and of SageMaker Training Sessions):

    token_ids   t0 t1 t2 t3 t4 t5          prompt_length = 2; BatchItem.loss_mask covers the
    loss_mask         0  1  1  0          tokens after the prompt (t2..t5), as traces do
    input       t0 t1 t2 t3 t4
    target         t1 t2 t3 t4 t5
    mask            0  0  1  1  0          1 where the target is a trained (sampled) token
    logprobs        0  0 l3 l4  0          the sampler's logprob of target i (0 where mask is 0)
    advantages      0  0  A  A  0          the rollout's advantage where mask is 1, else 0

The first token is never a target (it has no context): a trace needs a prompt of 1+ tokens.
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
    completion = len(item.token_ids) - item.prompt_length
    if item.prompt_length < 1 or len(item.loss_mask) != completion or len(item.old_logprobs) != completion:
        raise ValueError(
            f"trace of rollout {item.rollout_key!r}: {len(item.token_ids)} tokens, prompt_length "
            f"{item.prompt_length}, {len(item.loss_mask)} mask entries, {len(item.old_logprobs)} logprobs; "
            "need a prompt of 1+ tokens and one mask entry and logprob per token after it"
        )
    # Targets are token_ids[1:]: the prompt's targets (all but its first token) carry no loss.
    mask = (0.0,) * (item.prompt_length - 1) + tuple(float(m) for m in item.loss_mask)
    logprobs = (0.0,) * (item.prompt_length - 1) + tuple(
        float(lp) if m else 0.0 for lp, m in zip(item.old_logprobs, item.loss_mask)
    )
    return TokenDatum(
        group_id=item.group_id,
        rollout_key=item.rollout_key,
        prompt_length=item.prompt_length,
        input_tokens=item.token_ids[:-1],
        target_tokens=item.token_ids[1:],
        mask=mask,
        logprobs=logprobs,
        advantages=tuple(item.advantage if m else 0.0 for m in mask),
        advantage=item.advantage,
    )


def token_data(items: Sequence[BatchItem]) -> list[TokenDatum]:
    return [token_datum(item) for item in items]
