"""Shared plumbing of the HTTP samplers (vLLM, SGLang): routing key, errors, result checks.

`routing_key` carries the gateway session id to the sampler without widening the seam: the
gateway wraps a turn's `sample` call in `with routing_key(session_id):` and the HTTP samplers
send it as a sticky-routing header, so a load balancer keeps a session on the replica that
holds its prefix cache.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback
from ..records import FinishReason, SampleResult

ROUTING_HEADER = "X-Session-Id"

_routing_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("routing_key", default=None)


@contextlib.contextmanager
def routing_key(session_id: str | None) -> Iterator[None]:
    """Within this block, HTTP samplers send `session_id` as their sticky-routing header."""
    token = _routing_key.set(session_id)
    try:
        yield
    finally:
        _routing_key.reset(token)


def routing_headers(header: str = ROUTING_HEADER) -> dict[str, str]:
    key = _routing_key.get()
    return {header: key} if key else {}


async def post_json(client: httpx.AsyncClient, url: str, body: Mapping[str, Any], *, engine: str,
                    headers: Mapping[str, str] | None = None) -> Any:
    """POST `body`, return the decoded JSON; every failure is a `SamplingError` naming the engine."""
    try:
        response = await client.post(url, json=dict(body), headers=dict(headers or {}))
    except httpx.HTTPError as exc:
        raise SamplingError(f"{engine} request to {url} failed: {type(exc).__name__}: {exc}; is the "
                            "server running and reachable?") from exc
    if response.status_code >= 400:
        raise SamplingError(f"{engine} answered {response.status_code} at {url}: {response.text[:500]}")
    try:
        return response.json()
    except ValueError as exc:
        raise SamplingError(f"{engine} answered non-JSON at {url}: {response.text[:200]!r}") from exc


def finish_reason(value: Any, *, engine: str) -> FinishReason:
    if value in ("stop", "length"):
        return FinishReason(value)
    raise SamplingError(f"{engine} finished with {value!r}; only 'stop' and 'length' are usable for training")


def checked_result(token_ids: Sequence[Any], logprobs: Sequence[Any] | None, finish: FinishReason, *,
                   engine: str, policy_version: int, on_token: TokenCallback | None) -> SampleResult:
    """A `SampleResult` after checking one finite logprob per token; replays `on_token` in order."""
    if logprobs is None or len(logprobs) != len(token_ids):
        got = "no logprobs" if logprobs is None else f"{len(logprobs)} logprobs"
        raise SamplingError(f"{engine} returned {len(token_ids)} tokens but {got}; enable logprobs on the "
                            "server, a sample without them cannot be trained on")
    values = []
    for position, value in enumerate(logprobs):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SamplingError(f"{engine} returned logprob {value!r} for token {position}; expected a finite number")
        values.append(float(value))
    result = SampleResult(token_ids=tuple(int(t) for t in token_ids), logprobs=tuple(values),
                          finish_reason=finish, policy_version=policy_version)
    if on_token is not None:
        for token_id, logprob in zip(result.token_ids, result.logprobs):
            on_token(token_id, logprob)
    return result
