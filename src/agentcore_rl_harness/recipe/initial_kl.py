"""KL(initial policy || policy now), measured on tokens the initial policy sampled.

The first training step's rollouts were sampled by the policy RL started from, and the sampler
recorded each token's logprob. After every step the trainer recomputes those tokens' logprobs
under the current policy; with r = p_now / p_initial, the k3 estimate mean((r - 1) - log r) is an
unbiased, non-negative estimate of KL(initial || now). Its floor is the sampler's own mismatch
(`sampler_kl` of step 1: a bf16 serving copy shows there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..records import Trace

Logprobs = Callable[[Sequence[Trace]], "list[tuple[float | None, ...]] | None"]


def k3(initial: Sequence[float], now: Sequence[float]) -> float | None:
    terms = [math.expm1(b - a) - (b - a) for a, b in zip(initial, now)]
    return sum(terms) / len(terms) if terms else None


class InitialKL:
    """Keeps the first `limit` traces (with trained tokens and recorded logprobs) it is shown."""

    def __init__(self, limit: int, compute: Logprobs) -> None:
        self.limit, self.compute = limit, compute
        self.reference: list[Trace] = []

    def measure(self, traces: Sequence[Trace]) -> float | None:
        if self.limit < 1:
            return None
        if not self.reference:
            self.reference = [t for t in traces if any(t.loss_mask) and all(
                lp is not None for lp, m in zip(t.logprobs, t.loss_mask) if m)][:self.limit]
        if not self.reference:
            return None
        current = self.compute(self.reference)
        if current is None:  # a trainer that cannot recompute logprobs
            return None
        initial, now = [], []
        for trace, values in zip(self.reference, current):
            for old, new, mask in zip(trace.logprobs, values, trace.loss_mask):
                if mask and old is not None and new is not None:
                    initial.append(old)
                    now.append(new)
        value = k3(initial, now)
        return None if value is None else round(value, 6)
