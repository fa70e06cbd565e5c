"""The `SamplingBackend` seam: prompt token ids in, sampled token ids + logprobs out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from ..records import SampleResult, SamplingParams

# Called once per sampled token, in order, on the caller's event loop thread: (token_id, logprob).
TokenCallback = Callable[[int, float], None]


@runtime_checkable
class SamplingBackend(Protocol):
    """Token-in/token-out sampling. Implementations must return a logprob for every token.

    `on_token`, when given, is called for each token as it is sampled (for streaming); the
    returned `SampleResult` is still the complete, authoritative sample.
    """

    async def sample(
        self,
        *,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> SampleResult: ...
