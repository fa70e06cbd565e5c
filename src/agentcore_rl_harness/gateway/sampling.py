"""The `SamplingBackend` seam: prompt token ids in, sampled token ids + logprobs out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..records import SampleResult, SamplingParams


@runtime_checkable
class SamplingBackend(Protocol):
    """Token-in/token-out sampling. Implementations must return a logprob for every token."""

    async def sample(
        self, *, prompt_token_ids: Sequence[int], params: SamplingParams
    ) -> SampleResult: ...
