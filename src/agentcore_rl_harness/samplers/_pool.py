"""The remote samplers' HTTP/1.1 client: keep-alive connections pooled per origin, on asyncio
protocols, answers parsed by httptools (llhttp, the C parser under Node.js and uvicorn).

Why its own client. On the gateway's sampler path (loopback or one LAN hop, 64-4096 concurrent
turns, small JSON bodies) the client's CPU is paid by the gateway's one event-loop thread on every
turn. `bench/http_client.py` measured aiohttp 3.14 (pooled session) at 3.5x (one request at a
time) and 4.5x (64 concurrent) this client's CPU per request, a tuned httpx 0.28 at 15x and 57x:
aiohttp builds a request object, a cookie-jar pass, header multidicts and a writer task per
request; this client writes one pre-built head + body and parses the answer in C.

What it does and does not. POST only (what the samplers send), one request per connection at a
time (no pipelining), no redirects, no compression (it sends no Accept-Encoding), http and https.
Bodies: Content-Length, chunked, or delimited by the server's close. `max_connections` bounds all
open connections (streams wait for a free one beyond it; raise the open-file limit to match).
Idle connections are kept LIFO and dropped after `idle_timeout_s` (4 s: below uvicorn's default
5 s keep-alive; vLLM and SGLang serve with uvicorn) so a request is not sent on a connection the
server is closing; a request on a reused connection that the server closed before answering one byte is
sent once more on a fresh connection. A streamed answer read slower than it arrives pauses the
socket (`_response.HIGH_WATER` bytes buffered). Every failure is a `TransportError` whose `kind` is
ConnectError, Timeout or ConnectionDropped.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import functools
import ssl
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, urlsplit

import httptools

from ._response import Response, TransportError

__all__ = ["ConnectionPool", "Response", "TransportError"]

_FORBIDDEN = str.maketrans("", "", "\r\n\0")


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


@functools.lru_cache(maxsize=512)
def target(url: str) -> tuple[Origin, bytes]:
    """(origin, the head of a JSON POST to it up to its Content-Length line) of an http(s) URL;
    a clear ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}; expected e.g. http://127.0.0.1:8000")
    authority = parts.netloc.rpartition("@")[2]
    if not authority.isascii():
        raise ValueError(f"the host of {url!r} is not ASCII; give it IDNA-encoded (punycode)")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~") + (f"?{quote(parts.query, safe='/%:@!$&()*+,;=?-._~')}" if parts.query else "")
    head = f"POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n"
    return Origin(parts.scheme, parts.hostname, port), head.encode("ascii")


def request_head(prefix: bytes, content_length: int, headers: Mapping[str, str]) -> bytes:
    """`prefix` (from `target`) + Content-Length + `headers`; CR, LF and NUL in a header are refused."""
    lines = [prefix, b"Content-Length: %d\r\n" % content_length]
    for name, value in headers.items():
        if name.translate(_FORBIDDEN) != name or value.translate(_FORBIDDEN) != value:
            raise ValueError(f"header {name!r} has a CR, LF or NUL in its name or value {value!r}")
        lines.append(f"{name}: {value}\r\n".encode("latin-1"))
    lines.append(b"\r\n")
    return b"".join(lines)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: hands the parser's callbacks to the response in flight."""

    def __init__(self, pool: ConnectionPool, origin: Origin) -> None:
        self.pool, self.origin, self.loop = pool, origin, pool.loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._response: Response | None = None

    def send(self, data: bytes, read_timeout_s: float) -> Response:
        self._response = response = Response(self, read_timeout_s)
        try:
            self.transport.write(data)
        except (RuntimeError, OSError) as exc:  # the transport closed under us
            response._fail(TransportError("ConnectionDropped", f"the connection was closed ({exc})"))
        return response

    def finished(self, *, reusable: bool) -> None:
        """The response in flight ended (or was abandoned)."""
        self._response = None
        if reusable and not self.closed:
            self.pool.release(self)
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.pool.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.pool.lost(self)
        if self._response is not None:
            self._response._lost()

    def data_received(self, data: bytes) -> None:
        response = self._response
        if response is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        response.received = True
        response.last_data = self.loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response._fail(TransportError("ConnectionDropped", f"malformed HTTP answer ({exc})"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self._response is not None:
            self._response._header(name, value)

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if self._response is not None and not 100 <= status < 200:  # an interim answer: the real one follows
            self._response._headers_complete(status, self._parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._body(body)

    def on_message_complete(self) -> None:
        response = self._response
        if response is not None and response.status:
            response._complete()


class ConnectionPool:
    """Keep-alive connections of one event loop, per origin, at most `max_connections` open."""

    def __init__(self, *, max_connections: int, connect_timeout_s: float, read_timeout_s: float,
                 idle_timeout_s: float = 4.0) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.loop = asyncio.get_running_loop()
        self.max_connections = max_connections
        self.connect_timeout_s, self.read_timeout_s, self.idle_timeout_s = connect_timeout_s, read_timeout_s, idle_timeout_s
        self._idle: dict[Origin, dict[_Connection, None]] = {}
        self._open: set[_Connection] = set()
        self._opening = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._tls: ssl.SSLContext | None = None
        self.closed = False

    @property
    def connections(self) -> int:
        return len(self._open) + self._opening

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *,
                   read_timeout_s: float | None = None) -> Response:
        """Send a JSON POST; returns once the answer's head is in."""
        origin, prefix = target(url)
        data = request_head(prefix, len(body), headers) + body
        timeout = self.read_timeout_s if read_timeout_s is None else read_timeout_s
        for attempt in (1, 2):
            connection, reused = await self._acquire(origin)
            response = connection.send(data, timeout)
            try:
                await response.wait_head()
                return response
            except TransportError as exc:
                if attempt == 1 and reused and not response.received and exc.kind == "ConnectionDropped":
                    continue  # a stale keep-alive connection: the server never saw the request
                raise
            except BaseException:
                response.close()
                raise
        raise AssertionError("unreachable")

    async def _acquire(self, origin: Origin) -> tuple[_Connection, bool]:
        while True:
            if self.closed:
                raise TransportError("ConnectError", "the client was closed")
            idle = self._idle.get(origin)
            now = self.loop.time()
            while idle:
                connection, _ = idle.popitem()
                if connection.closed or connection.transport.is_closing():  # closing: the peer's EOF came
                    continue
                if now - connection.idle_since > self.idle_timeout_s:
                    connection.close()
                    continue
                return connection, True
            if self.connections < self.max_connections:
                return await self._connect(origin), False
            self._evict_other_than(origin)
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: the free slot goes to the next waiter
                raise

    async def _connect(self, origin: Origin) -> _Connection:
        tls = None
        if origin.scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        self._opening += 1
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await self.loop.create_connection(
                    lambda: _Connection(self, origin), origin.host, origin.port, ssl=tls,
                    server_hostname=origin.host if tls else None)
        except TimeoutError as exc:
            raise TransportError("Timeout", f"connecting took over {self.connect_timeout_s} s") from exc
        except OSError as exc:
            kind = "ConnectError"
            if exc.errno == errno.EMFILE:
                raise TransportError(kind, f"{exc}: raise the open-file limit (ulimit -n) or lower "
                                           "max_connections") from exc
            raise TransportError(kind, str(exc) or type(exc).__name__) from exc
        finally:
            self._opening -= 1
            if self.connections < self.max_connections:
                self._wake_one()
        return connection

    def _evict_other_than(self, origin: Origin) -> None:
        """At the limit with idle connections to other origins: close one so this origin gets a slot."""
        for other, idle in self._idle.items():
            if other != origin and idle:
                connection = next(iter(idle))
                del idle[connection]
                connection.close()
                return

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # called by connections
    def opened(self, connection: _Connection) -> None:
        self._open.add(connection)

    def release(self, connection: _Connection) -> None:
        if self.closed:
            connection.close()
            return
        connection.idle_since = self.loop.time()
        self._idle.setdefault(connection.origin, {})[connection] = None
        self._wake_one()

    def lost(self, connection: _Connection) -> None:
        self._open.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle is not None:
            idle.pop(connection, None)
        self._wake_one()

    def close(self) -> None:
        """Close every connection; requests in flight fail as dropped."""
        self.closed = True
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
