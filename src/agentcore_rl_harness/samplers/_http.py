"""Shared plumbing of the HTTP samplers (vLLM, SGLang): routing header, SSE, errors, result checks.

The routing key is the gateway session id (`gateway.sampling.routing_key`, set around each
turn's `sample` call); the HTTP samplers send it as a sticky-routing header, so a load balancer
keeps a session on the replica that holds its prefix cache.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import orjson

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback, current_routing_key
from ..records import FinishReason, SampleResult

ROUTING_HEADER = "X-Session-Id"

__all__ = ["ROUTING_HEADER", "TokenStream", "checked_result", "finish_reason", "post_events", "routing_headers"]


def routing_headers(header: str = ROUTING_HEADER) -> dict[str, str]:
    """`{header: session id}` while the gateway samples a session's turn, else `{}`."""
    key = current_routing_key()
    return {header: key} if key else {}


async def post_events(client: httpx.AsyncClient, url: str, body: Mapping[str, Any], *, engine: str,
                      headers: Mapping[str, str] | None = None) -> AsyncIterator[Any]:
    """POST `body` and yield each `data: <json>` event of the server-sent stream until
    `data: [DONE]`, as it arrives. A server that answers plain JSON instead (it ignored `stream`)
    yields that one object. An event `{"error": ...}`, an HTTP error or a stream that ends without
    `[DONE]` is a `SamplingError`."""
    try:
        async with client.stream("POST", url, json=dict(body), headers=dict(headers or {})) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")
                raise SamplingError(f"{engine} answered {response.status_code} at {url}: {text[:500]}")
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                yield _decoded(await response.aread(), engine=engine, url=url)
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments, `event:` lines
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                event = _decoded(data.encode(), engine=engine, url=url)
                if isinstance(event, Mapping) and event.get("error") is not None:
                    raise SamplingError(f"{engine} stream from {url} failed: {str(event['error'])[:500]}")
                yield event
    except httpx.HTTPError as exc:
        raise SamplingError(f"{engine} request to {url} failed: {type(exc).__name__}: {exc}; is the "
                            "server running and reachable?") from exc
    raise SamplingError(f"{engine} stream from {url} ended without 'data: [DONE]' (the server closed it early)")


def _decoded(data: bytes, *, engine: str, url: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)  # NaN / Infinity, which a checked logprob then refuses by name
        except ValueError as exc:
            raise SamplingError(f"{engine} answered non-JSON at {url}: {data[:200]!r}") from exc


def checked_logprob(value: Any, position: int, *, engine: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SamplingError(f"{engine} returned logprob {value!r} for token {position}; expected a finite number")
    return float(value)


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
    values = [checked_logprob(value, position, engine=engine) for position, value in enumerate(logprobs)]
    result = SampleResult(token_ids=tuple(int(t) for t in token_ids), logprobs=tuple(values),
                          finish_reason=finish, policy_version=policy_version)
    if on_token is not None:
        for token_id, logprob in zip(result.token_ids, result.logprobs):
            on_token(token_id, logprob)
    return result


class TokenStream:
    """The tokens of one sample as they stream in: each logprob is checked and handed to
    `on_token` on arrival, so the gateway streams tokens while the engine decodes them."""

    def __init__(self, *, engine: str, on_token: TokenCallback | None) -> None:
        self.engine = engine
        self.on_token = on_token
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []

    def extend(self, token_ids: Sequence[Any], logprobs: Sequence[Any] | None) -> None:
        if logprobs is None or len(logprobs) != len(token_ids):
            got = "no logprobs" if logprobs is None else f"{len(logprobs)} logprobs"
            raise SamplingError(f"{self.engine} streamed {len(token_ids)} tokens but {got}; enable logprobs on "
                                "the server, a sample without them cannot be trained on")
        for token_id, value in zip(token_ids, logprobs):
            logprob = checked_logprob(value, len(self.token_ids), engine=self.engine)
            self.token_ids.append(int(token_id))
            self.logprobs.append(logprob)
            if self.on_token is not None:
                self.on_token(self.token_ids[-1], logprob)

    def result(self, finish: FinishReason, *, policy_version: int) -> SampleResult:
        return SampleResult(token_ids=tuple(self.token_ids), logprobs=tuple(self.logprobs),
                            finish_reason=finish, policy_version=policy_version)
