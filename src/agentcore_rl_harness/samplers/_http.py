"""Shared plumbing of the HTTP samplers (vLLM, SGLang): the pooled client, SSE, errors, result checks.

`HttpClient` holds one aiohttp `ClientSession` per event loop with a keep-alive connection pool
sized for thousands of concurrent streams (`max_connections`, default 4096; raise the open-file
limit to match). aiohttp rather than httpx: on this path (loopback, 64-128 concurrent turns, small
JSON bodies) `bench/http_client.py` measured httpx 0.28 (pool limits raised, HTTP/1.1) at several
times aiohttp's client CPU per request: httpx's pool is pure Python through httpcore and anyio
with per-request lock and scan work that grows with the number of pooled connections, while
aiohttp parses with its C extension and hands connections back in O(1).

A turn that is not streamed to its caller is one JSON request (`stream: false`); a streamed one is
read as server-sent events parsed by the spec (`_sse.SSEDecoder`: multi-line `data:`, `event:`,
comments, CR/LF/CRLF). The routing key is the gateway session id (`gateway.sampling.routing_key`,
set around each turn's `sample` call); the HTTP samplers send it as a sticky-routing header, so a
load balancer keeps a session on the replica that holds its prefix cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback, current_routing_key
from ..records import FinishReason, SampleResult
from ._sse import SSEDecoder, ServerSentEvent

ROUTING_HEADER = "X-Session-Id"
MAX_CONNECTIONS = 4096
_JSON = {"Content-Type": "application/json"}
_DONE = object()

__all__ = ["MAX_CONNECTIONS", "ROUTING_HEADER", "HttpClient", "TokenStream", "checked_result", "finish_reason",
           "routing_headers", "wants_stream"]


def routing_headers(header: str = ROUTING_HEADER) -> dict[str, str]:
    """`{header: session id}` while the gateway samples a session's turn, else `{}`."""
    key = current_routing_key()
    return {header: key} if key else {}


def wants_stream(stream: bool | None, on_token: TokenCallback | None) -> bool:
    """Whether to ask the engine for a stream: `stream=None` (auto) streams exactly the turns whose
    caller takes tokens as they come (`on_token`); True or False force it."""
    return on_token is not None if stream is None else stream


class HttpClient:
    """POSTs JSON to one engine over a pooled keep-alive client; every failure is a `SamplingError`.

    The aiohttp session is made on first use in the running event loop (a session is bound to its
    loop); a call from another loop gets a fresh one. `timeout_s` bounds connecting and each wait
    for the next bytes of an answer (not a whole long generation)."""

    def __init__(self, *, engine: str, timeout_s: float = 600.0, max_connections: int = MAX_CONNECTIONS) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.engine = engine
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            if self._session is not None and not self._session.closed:
                self._session.detach()  # bound to a loop that is gone; its sockets went with it
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s, sock_read=self.timeout_s)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
            self._loop = loop
        return self._session

    async def post(self, url: str, body: Mapping[str, Any], *,
                   headers: Mapping[str, str] | None = None) -> list[Any]:
        """POST `body` and return the whole answer: `[the JSON object]`, or, if the server
        streamed anyway, the data of all its events up to `data: [DONE]`."""
        try:
            async with self._client().post(url, data=dumps(body), headers={**_JSON, **(headers or {})}) as response:
                raw = await response.read()
                status, content_type = response.status, response.content_type
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._failure(url, exc) from exc
        if status >= 400:
            raise SamplingError(f"{self.engine} answered {status} at {url}: {raw.decode(errors='replace')[:500]}")
        if content_type != "text/event-stream":
            return [self._decoded(raw, url)]
        events = []
        for event in SSEDecoder().feed(raw):
            item = self._item(event, url)
            if item is _DONE:
                return events
            events.append(item)
        raise self._no_done(url)

    async def post_events(self, url: str, body: Mapping[str, Any], *,
                          headers: Mapping[str, str] | None = None) -> AsyncIterator[Any]:
        """POST `body` and yield each event's JSON data as it arrives, until `data: [DONE]`. A
        server that answers plain JSON instead (it ignored `stream`) yields that one object.
        Use under `contextlib.aclosing`: closing it early drops the connection, which makes the
        engine abort the request."""
        try:
            async with self._client().post(url, data=dumps(body), headers={**_JSON, **(headers or {})}) as response:
                if response.status >= 400:
                    text = (await response.read()).decode(errors="replace")
                    raise SamplingError(f"{self.engine} answered {response.status} at {url}: {text[:500]}")
                if response.content_type != "text/event-stream":
                    yield self._decoded(await response.read(), url)
                    return
                decoder = SSEDecoder()
                try:
                    async for chunk in response.content.iter_any():
                        for event in decoder.feed(chunk):
                            item = self._item(event, url)
                            if item is _DONE:
                                await response.read()  # the end of the body, so the connection is reused
                                return
                            yield item
                except BaseException:
                    response.close()  # a half-read stream never goes back to the pool
                    raise
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._failure(url, exc) from exc
        raise self._no_done(url)

    async def post_quietly(self, url: str, body: Mapping[str, Any], *, timeout_s: float = 5.0) -> None:
        """Best effort (an abort): any failure is ignored."""
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
            async with self._client().post(url, data=dumps(body), headers=_JSON,
                                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                await response.read()

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    def _item(self, event: ServerSentEvent, url: str) -> Any:
        if event.event == "error":
            raise SamplingError(f"{self.engine} stream from {url} failed: {event.data[:500]}")
        if event.data.strip() == "[DONE]":
            return _DONE
        item = self._decoded(event.data.encode(), url)
        if isinstance(item, Mapping) and item.get("error") is not None:
            raise SamplingError(f"{self.engine} stream from {url} failed: {str(item['error'])[:500]}")
        return item

    def _decoded(self, data: bytes, url: str) -> Any:
        return _decoded(data, engine=self.engine, url=url)

    def _no_done(self, url: str) -> SamplingError:
        return SamplingError(f"{self.engine} stream from {url} ended without 'data: [DONE]' (the server closed it early)")

    def _failure(self, url: str, exc: BaseException) -> SamplingError:
        if isinstance(exc, aiohttp.ClientConnectorError):
            kind, hint = "ConnectError", "is the server running and reachable?"
        elif isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            kind, hint = "Timeout", f"no answer within {self.timeout_s} s; raise timeout_s or check the server's load"
        elif isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError)):
            kind, hint = "ConnectionDropped", "the server closed the connection mid-answer; check its log"
        else:
            kind, hint = type(exc).__name__, "is the server running and reachable?"
        return SamplingError(f"{self.engine} request to {url} failed: {kind}: {exc}; {hint}")


def _decoded(data: bytes, *, engine: str, url: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)  # NaN / Infinity, which a checked logprob then refuses by name
        except ValueError as exc:
            raise SamplingError(f"{engine} answered non-JSON at {url}: {data[:200]!r}") from exc


def _plain(token_ids: Sequence[Any], logprobs: Sequence[Any]) -> bool:
    """True when every id is an int and every logprob a finite float (JSON gives exactly these)."""
    return (all(type(t) is int for t in token_ids) and all(type(v) is float for v in logprobs)
            and math.isfinite(sum(logprobs)))  # inf or nan anywhere makes the sum so


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


def _json_default(value: Any) -> Any:
    """orjson's fallback: integer-like ids (numpy ints) as ints; anything else is a clear error."""
    try:
        return int(value.__index__())
    except AttributeError:
        raise TypeError(f"cannot send {type(value).__name__} {value!r} as JSON") from None


def dumps(body: Mapping[str, Any]) -> bytes:
    """A request body as JSON bytes; token-id tuples and lists are written as they are (no copy)."""
    return orjson.dumps(body, default=_json_default)


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
        if self.on_token is None and _plain(token_ids, logprobs):  # the common case, checked in bulk
            self.token_ids.extend(token_ids)
            self.logprobs.extend(logprobs)
            return
        for token_id, value in zip(token_ids, logprobs):
            logprob = checked_logprob(value, len(self.token_ids), engine=self.engine)
            if isinstance(token_id, bool) or not isinstance(token_id, int):
                raise SamplingError(f"{self.engine} returned token id {token_id!r} at position {len(self.token_ids)}; "
                                    "expected an integer")
            self.token_ids.append(token_id)
            self.logprobs.append(logprob)
            if self.on_token is not None:
                self.on_token(self.token_ids[-1], logprob)

    def result(self, finish: FinishReason, *, policy_version: int) -> SampleResult:
        return SampleResult(token_ids=tuple(self.token_ids), logprobs=tuple(self.logprobs),
                            finish_reason=finish, policy_version=policy_version)
