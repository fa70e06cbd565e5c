"""One HTTP answer as it arrives on a pooled connection (`_pool.py`): head, body, timeouts, backpressure.

The connection's parser hands it the head and body pieces; the reader awaits `read()` (the whole
body) or iterates `chunks()` (a stream). It bounds each wait for the next bytes by the read
timeout (one timer per answer, re-armed from the time of the last bytes rather than reset on
every piece), pauses the socket while more than `HIGH_WATER` bytes wait for a slow reader, and
gives the connection back (or closes it) the moment the answer ends, fails or is abandoned.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Protocol

__all__ = ["HIGH_WATER", "Carrier", "Response", "TransportError"]

HIGH_WATER = 256 * 1024


class Carrier(Protocol):
    """What an answer needs of the connection it arrives on (`_pool._Connection`)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def finished(self, *, reusable: bool) -> None: ...


class TransportError(Exception):
    """A request failed below HTTP. `kind`: ConnectError, Timeout or ConnectionDropped."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Response:
    """One answer as it arrives: `status` and `content_type` once the head is in, then the body
    through `read()` or `chunks()`. `close()` drops the connection if the body is unfinished."""

    def __init__(self, connection: Carrier, read_timeout_s: float) -> None:
        self._connection: Carrier | None = connection
        self._loop = connection.loop
        self._read_timeout_s = read_timeout_s
        self.status = 0
        self.content_type = ""
        self.received = False  # any byte of the answer arrived
        self.last_data = self._loop.time()
        self._delimited = False  # by Content-Length or chunked; else by the close
        self._keep_alive = False
        self._head = self._loop.create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._streaming = False
        self._done = False
        self._error: TransportError | None = None
        self._waiter: asyncio.Future | None = None
        self._timer = self._loop.call_later(read_timeout_s, self._check_timeout)

    async def wait_head(self) -> None:
        await self._head

    async def read(self) -> bytes:
        """The whole body (or the rest of it, after `chunks()`)."""
        self._streaming = False
        self._resume()
        while not self._done:
            await self._wait()
        if self._error is not None:
            raise self._error
        body = b"".join(self._chunks)
        self._chunks.clear()
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (each item is all that arrived since the last)."""
        self._streaming = True
        while True:
            if self._chunks:
                data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                self._chunks.clear()
                self._buffered = 0
                self._resume()
                yield data
            elif self._error is not None:
                raise self._error
            elif self._done:
                return
            else:
                await self._wait()

    def close(self) -> None:
        """Stop reading: an unfinished answer's connection is closed (never reused)."""
        if not self._done:
            self._fail(TransportError("ConnectionDropped", "the answer was abandoned before its end"))

    def _resume(self) -> None:
        if self._paused and self._connection is not None:
            self._paused = False
            self.last_data = self._loop.time()
            self._connection.transport.resume_reading()

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _check_timeout(self) -> None:
        if self._done:
            return
        if self._paused:  # our reader is the slow one, not the server
            self.last_data = self._loop.time()
        waited = self._loop.time() - self.last_data
        if waited >= self._read_timeout_s * 0.999:
            self._fail(TransportError("Timeout", f"no bytes for {self._read_timeout_s} s"))
        else:
            self._timer = self._loop.call_later(self._read_timeout_s - waited, self._check_timeout)

    # called by the connection's parser
    def _header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1").split(";", 1)[0].strip().lower()
        elif name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self._delimited = True

    def _headers_complete(self, status: int, keep_alive: bool) -> None:
        self.status, self._keep_alive = status, keep_alive
        if not self._head.done():
            self._head.set_result(None)

    def _body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._streaming and self._buffered > HIGH_WATER and not self._paused and self._connection is not None:
            self._paused = True
            self._connection.transport.pause_reading()
        self._wake()

    def _complete(self) -> None:
        self._done = True
        self._timer.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.finished(reusable=self._keep_alive)
        self._wake()

    def _lost(self) -> None:
        if self._done:
            return
        if self._head.done() and not self._delimited:
            self._complete()  # the close ends a body sent without a length
        elif self.received:
            self._fail(TransportError("ConnectionDropped", "the server closed the connection mid-answer"))
        else:
            self._fail(TransportError("ConnectionDropped", "the server closed the connection without answering"))

    def _fail(self, error: TransportError) -> None:
        if self._done:
            return
        self._done, self._error = True, error
        self._timer.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.finished(reusable=False)
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: a cancelled waiter must not leave it to be logged
        self._wake()
