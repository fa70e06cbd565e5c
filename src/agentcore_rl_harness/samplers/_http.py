"""Shared plumbing of the HTTP samplers (vLLM, SGLang): the pooled client, SSE, errors, result checks.

`HttpClient` holds one `_pool.ConnectionPool` per event loop: keep-alive HTTP/1.1 connections
parsed in C by httptools, up to `max_connections` (default 4096; raise the open-file limit to
match) open at once, so thousands of turns can stream concurrently. Its own client rather than
aiohttp or httpx: the gateway's one event-loop thread pays the client's CPU on every turn, and
`bench/http_client.py` measured aiohttp at 3.5-4.5x this client's CPU per request, httpx at 15-57x
(see `_pool.py`).

A turn that is not streamed to its caller is one JSON request (`stream: false`); a streamed one is
read as server-sent events parsed by the spec (`_sse.SSEDecoder`: multi-line `data:`, `event:`,
comments, `retry`, CR/LF/CRLF). The routing key is the gateway session id
(`gateway.sampling.routing_key`, set around each turn's `sample` call); the HTTP samplers send it
as a sticky-routing header, so a load balancer keeps a session on the replica that holds its
prefix cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback, current_routing_key
from ..records import FinishReason, SampleResult
from ._pool import ConnectionPool, Response, TransportError
from ._sse import SSEDecoder, ServerSentEvent

ROUTING_HEADER = "X-Session-Id"
MAX_CONNECTIONS = 4096
_NO_HEADERS: Mapping[str, str] = {}
_DONE = object()
_HINTS = {"ConnectError": "is the server running and reachable?",
          "ConnectionDropped": "the server closed the connection mid-answer; check its log"}

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
    """POSTs JSON to one engine over pooled keep-alive connections; every failure is a `SamplingError`.

    The pool is made on first use in the running event loop (its connections belong to that
    loop); a call from another loop gets a fresh one. `timeout_s` bounds connecting and each wait
    for the next bytes of an answer (not a whole long generation)."""

    def __init__(self, *, engine: str, timeout_s: float = 600.0, max_connections: int = MAX_CONNECTIONS) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.engine = engine
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self._pool: ConnectionPool | None = None

    def _connections(self) -> ConnectionPool:
        pool = self._pool
        if pool is None or pool.closed or pool.loop is not asyncio.get_running_loop():
            # a pool of a loop that is gone is dropped with it: its sockets went with that loop
            pool = self._pool = ConnectionPool(max_connections=self.max_connections,
                                               connect_timeout_s=self.timeout_s, read_timeout_s=self.timeout_s)
        return pool

    async def _send(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str] | None,
                    read_timeout_s: float | None = None) -> Response:
        try:
            return await self._connections().post(url, dumps(body), headers or _NO_HEADERS,
                                                  read_timeout_s=read_timeout_s)
        except TransportError as exc:
            raise self._failure(url, exc) from exc
        except ValueError as exc:  # a URL or header that HTTP cannot carry
            raise SamplingError(f"{self.engine} request to {url} not sent: {exc}") from exc

    async def post(self, url: str, body: Mapping[str, Any], *,
                   headers: Mapping[str, str] | None = None) -> list[Any]:
        """POST `body` and return the whole answer: `[the JSON object]`, or, if the server
        streamed anyway, the data of all its events up to `data: [DONE]`."""
        response = await self._send(url, body, headers)
        try:
            raw = await response.read()
        except TransportError as exc:
            raise self._failure(url, exc) from exc
        finally:
            response.close()
        if response.status >= 400:
            raise self._status_error(url, response.status, raw)
        if response.content_type != "text/event-stream":
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
        response = await self._send(url, body, headers)
        try:
            if response.status >= 400 or response.content_type != "text/event-stream":
                raw = await response.read()
                if response.status >= 400:
                    raise self._status_error(url, response.status, raw)
                yield self._decoded(raw, url)
                return
            decoder = SSEDecoder()
            async for chunk in response.chunks():
                for event in decoder.feed(chunk):
                    item = self._item(event, url)
                    if item is _DONE:
                        await response.read()  # the end of the body, so the connection is reused
                        return
                    yield item
        except TransportError as exc:
            raise self._failure(url, exc) from exc
        finally:
            response.close()  # a half-read answer never goes back to the pool
        raise self._no_done(url)

    async def post_quietly(self, url: str, body: Mapping[str, Any], *, timeout_s: float = 5.0) -> None:
        """Best effort (an abort), within `timeout_s`: any failure is ignored."""
        with contextlib.suppress(SamplingError, TransportError, TimeoutError):
            async with asyncio.timeout(timeout_s):
                response = await self._send(url, body, None, read_timeout_s=timeout_s)
                try:
                    await response.read()
                finally:
                    response.close()

    async def aclose(self) -> None:
        if self._pool is not None and self._pool.loop is asyncio.get_running_loop():
            self._pool.close()
        self._pool = None

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

    def _status_error(self, url: str, status: int, raw: bytes) -> SamplingError:
        return SamplingError(f"{self.engine} answered {status} at {url}: {raw.decode(errors='replace')[:500]}")

    def _no_done(self, url: str) -> SamplingError:
        return SamplingError(f"{self.engine} stream from {url} ended without 'data: [DONE]' (the server closed it early)")

    def _failure(self, url: str, exc: TransportError) -> SamplingError:
        hint = _HINTS.get(exc.kind, f"no answer within {self.timeout_s} s; raise timeout_s or check the server's load")
        return SamplingError(f"{self.engine} request to {url} failed: {exc.kind}: {exc}; {hint}")


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
