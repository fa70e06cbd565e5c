"""The coalescing HTTP protocol: one write per response, streams still incremental."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import uvicorn

from agentcore_rl_harness.gateway.http import CoalescingHttpProtocol, _CoalescingTransport


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default=None):
        return f"info:{name}"


def test_writes_of_one_loop_iteration_leave_as_one():
    async def scenario():
        inner = RecordingTransport()
        transport = _CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"body")
        assert inner.writes == []
        await asyncio.sleep(0)
        transport.write(b"next")
        transport.close()
        return inner

    inner = asyncio.run(scenario())
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next"]
    assert inner.closed


def test_everything_but_write_is_the_wrapped_transport():
    async def scenario():
        transport = _CoalescingTransport(RecordingTransport(), asyncio.get_running_loop())
        return transport.get_extra_info("peername")

    assert asyncio.run(scenario()) == "info:peername"


@pytest.fixture
def serve():
    servers = []

    def start(app) -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, http=CoalescingHttpProtocol, log_level="warning",
                                               lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        servers.append((server, thread))
        while not server.started:
            time.sleep(0.005)
        return sock.getsockname()[1]

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)


def test_a_stream_is_sent_as_it_is_produced(serve):
    release = threading.Event()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        while not release.is_set():  # the rest waits until the client has seen the first chunk
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"second"})

    port = serve(app)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""

        def more() -> bytes:
            chunk = client.recv(65536)
            assert chunk, f"the server closed the connection after {received!r}"
            return chunk

        while b"first" not in received:
            received += more()
        release.set()
        while not received.endswith(b"0\r\n\r\n"):
            received += more()
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert b"5\r\nfirst\r\n" in received and b"6\r\nsecond\r\n" in received
