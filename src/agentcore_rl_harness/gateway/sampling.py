"""The `SamplingBackend` seam: prompt token ids in, sampled token ids + logprobs out.

Which session a sample belongs to rides beside the seam, not through it: the gateway samples each
turn inside `routing_key(session_id)`, and a backend that can use it (the HTTP samplers send it
as a sticky-routing header, so a load balancer keeps a session on the replica holding its prefix
cache) reads `current_routing_key()`. Backends that do not care never see it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import SamplingError
from ..records import SampleResult, SamplingParams

# Called once per sampled token, in order, on the caller's event loop thread: (token_id, logprob).
TokenCallback = Callable[[int, float], None]

_routing_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("routing_key", default=None)


@contextlib.contextmanager
def routing_key(session_id: str | None) -> Iterator[None]:
    """Within this block (and tasks created in it), `current_routing_key()` is `session_id`."""
    token = _routing_key.set(session_id)
    try:
        yield
    finally:
        _routing_key.reset(token)


def current_routing_key() -> str | None:
    """The session id of the sample being taken, when the gateway set one."""
    return _routing_key.get()


@runtime_checkable
class SamplingBackend(Protocol):
    """Token-in/token-out sampling. Implementations subclass it and must return a logprob for
    every token; the optional capabilities below are defaults (no weights version, no scoring,
    nothing to close), so callers never probe for them.

    `on_token`, when given, is called for each token as it is sampled (for streaming); the
    returned `SampleResult` is still the complete, authoritative sample.
    """

    policy_version: int | None = None  # the weights new samples come from (None: keeps no version)

    async def sample(
        self,
        *,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> SampleResult: ...

    async def score(self, *, prompt_token_ids: Sequence[int], completion_token_ids: Sequence[int],
                    temperature: float = 1.0) -> Sequence[float]:
        """The policy's logprob of each of `completion_token_ids` after `prompt_token_ids`, under
        softmax(logits / temperature). A sampler that cannot score raises `SamplingError`."""
        raise SamplingError(
            f"the {type(self).__name__} sampler cannot score a completion; scoring needs the "
            "in-process hf sampler (sampler=hf) or a Tinker-API service trainer")

    def close(self) -> None:
        """Release what the sampler holds (default: nothing)."""
        return None


@runtime_checkable
class WeightSync(Protocol):
    """Publishing a trainer's new weights to the sampler that serves the policy.

    `weights` is what that sampler samples from: a torch model (`hf_local`), a Tinker or SageMaker
    sampling client. Samples in flight finish on the old weights and report the old version;
    later ones use `weights` and report `policy_version`.
    """

    def publish_weights(self, weights: Any, *, policy_version: int) -> None: ...
