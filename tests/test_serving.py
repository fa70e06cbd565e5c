"""`serving.ThreadedServer`: the one uvicorn-on-a-thread helper of the gateway and the Tinker server."""

import socket

import httpx
import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.serving import ThreadedServer, bind_socket, url_host


async def _app(scope, receive, send):
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": scope["path"].encode()})


def test_serves_until_stopped_and_stops_twice_safely():
    sock = bind_socket("127.0.0.1", 0, what="the test server")
    server = ThreadedServer(_app, sock, what="the test server", thread_name="test-server")
    server.start()
    try:
        assert server.alive
        assert httpx.get(f"http://127.0.0.1:{server.port}/hello", timeout=5).text == "/hello"
        with pytest.raises(HarnessError, match="already started"):
            server.start()
    finally:
        server.stop()
        server.stop()
    assert not server.alive
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2)


def test_a_taken_port_is_a_clear_error():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(HarnessError, match=r"cannot bind the gateway to 127\.0\.0\.1:\d+.*0 picks a free one"):
            bind_socket("127.0.0.1", taken.getsockname()[1], what="the gateway")
    finally:
        taken.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_that_cannot_start_says_so():
    sock = bind_socket("127.0.0.1", 0, what="x")
    server = ThreadedServer(_app, sock, what="the broken server", thread_name="t", http="no.such.Protocol")
    with pytest.raises(HarnessError, match="the broken server did not start"):
        server.start()
    assert not server.alive


def test_url_host_brackets_ipv6():
    assert url_host("::1") == "[::1]" and url_host("127.0.0.1") == "127.0.0.1"
