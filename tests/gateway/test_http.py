"""The coalescing HTTP protocol: one write per response, streams still incremental."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import uvicorn

from agentcore_rl_harness.gateway.http import CoalescingHttpProtocol, _CoalescingTransport
from agentcore_rl_harness.gateway.server import GatewayConfig


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


def test_the_gateway_serves_through_the_coalescing_protocol(gateway_factory, monkeypatch):
    """gateway/http.py subclasses uvicorn's private HttpToolsProtocol: the real GatewayServer must
    still hand its connections to that subclass, and one JSON answer must leave as one write."""
    import httpx

    made, writes = [], []
    original_made = CoalescingHttpProtocol.connection_made
    original_flush = _CoalescingTransport.flush

    def spy_made(self, transport):
        made.append(type(self))
        original_made(self, transport)

    def spy_flush(self):
        if self._pending:
            writes.append(len(self._pending))
        original_flush(self)

    monkeypatch.setattr(_CoalescingTransport, "flush", spy_flush)
    monkeypatch.setattr(CoalescingHttpProtocol, "connection_made", spy_made)
    server, _ = gateway_factory(["hi"])
    response = httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {server.sessions.open()}"})
    assert response.status_code == 200
    assert made == [CoalescingHttpProtocol]
    assert writes == [2]  # uvicorn's two writes (head, body) left as one send


def test_installed_uvicorn_is_inside_the_pinned_range():
    """The pin in pyproject.toml is the range this subclass was tested with."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    from packaging.specifiers import SpecifierSet

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    pin = re.search(r'"uvicorn([^"]+)"', pyproject).group(1)
    assert "<" in pin, "uvicorn needs an upper bound: gateway/http.py subclasses a private class"
    assert version("uvicorn") in SpecifierSet(pin)


def test_a_keep_alive_connection_idle_past_the_clients_expiry_is_still_served(gateway_factory):
    """The gateway's idle timeout (keep_alive_s) outlives httpx's 5 s keep-alive expiry, so a
    client reusing a connection it just kept never meets a server-side close (the race that lost
    a request under load with uvicorn's 5 s default); a shorter keep_alive_s does close it."""
    from urllib.parse import urlsplit

    def request(sock, host, key):
        sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        return sock.recv(65536)

    for keep_alive_s, served_after_idle in ((75, True), (1, False)):
        server, _ = gateway_factory(["hi"], config=GatewayConfig(keep_alive_s=keep_alive_s))
        url = urlsplit(server.base_url)
        key = server.sessions.open()
        with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
            assert request(sock, url.netloc, key).startswith(b"HTTP/1.1 200")
            time.sleep(6)  # longer than httpx's keepalive_expiry (5 s)
            try:
                answer = request(sock, url.netloc, key)
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
            assert answer.startswith(b"HTTP/1.1 200") is served_after_idle, answer[:80]


def _post(port: int, pieces: list[bytes], pause_s: float = 0.0) -> bytes:
    """POST a body sent in `pieces` (`pause_s` between them); the response."""
    body = b"".join(pieces)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        for index, piece in enumerate(pieces):
            client.sendall(head + piece if index == 0 else piece)
            time.sleep(pause_s)
        received = b""
        while b"\r\n\r\n" not in received or not received.endswith(b"done"):
            chunk = client.recv(65536)
            assert chunk, f"the server closed the connection after {received!r}"
            received += chunk
    return received


def test_a_body_that_arrives_in_one_chunk_reaches_the_app_uncopied(serve, monkeypatch):
    """uvicorn appends each chunk to a bytearray and `receive()` copies that into bytes: two
    copies of every body. Through the gateway's protocol a body parsed in one chunk is the very
    bytes object the parser made; a body in several chunks (read before or after the app asks
    for it) still arrives whole and in order."""
    parsed, received, delay = [], [], {"s": 0.0}
    on_body = CoalescingHttpProtocol.on_body

    def spy(self, body):
        parsed.append(body)
        on_body(self, body)

    async def app(scope, receive, send):
        await asyncio.sleep(delay["s"])  # > 0: the later chunks come in before the app reads
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message["body"])
            more = message.get("more_body", False)
        received.append(chunks)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"done"})

    monkeypatch.setattr(CoalescingHttpProtocol, "on_body", spy)
    port = serve(app)
    small = bytes(range(256)) * 40  # sent with its head in one write: parsed in one chunk
    assert _post(port, [small]).startswith(b"HTTP/1.1 200")
    assert len(parsed) == 1 and received[-1] == [small] and received[-1][0] is parsed[0]
    body = bytes(range(256)) * 1024  # 256 KiB: past uvicorn's 64 KiB high-water mark
    for delay["s"], pause_s in ((0.0, 0.0), (0.0, 0.05), (0.3, 0.02)):
        parsed.clear()
        pieces = [body[:1000], body[1000:70_000], body[70_000:]]
        assert _post(port, pieces, pause_s).startswith(b"HTTP/1.1 200")
        assert len(parsed) >= 3 * bool(pause_s) and b"".join(received[-1]) == body


def test_a_body_in_one_message_reaches_the_route_as_it_was_received():
    """`routing.read_body` hands on the one chunk a body came in (the parser's bytes) without
    joining it to starlette's closing b"" (a copy of every body); a body in several messages is
    joined once."""
    from starlette.requests import Request

    from agentcore_rl_harness.gateway.routing import read_body

    def request(*chunks):
        messages = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                    for i, chunk in enumerate(chunks)]

        async def receive():
            return messages.pop(0)
        return Request({"type": "http", "method": "POST", "headers": []}, receive)

    body = b"x" * 70_000
    assert asyncio.run(read_body(request(body), 1 << 20)) is body
    assert asyncio.run(read_body(request(body[:10], body[10:]), 1 << 20)) == body
