"""`ThreadedServer`: an ASGI app under uvicorn on a daemon thread, for servers used from sync code.

The gateway and the Tinker server both need the same thing: bind first (port 0 picks a free port,
known before serving), serve on a background thread, return once uvicorn accepts requests, and
stop and join on `stop()`. uvicorn is imported when a server starts.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

from .errors import HarnessError


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name, brackets allowed) only reaches this machine."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host in ("localhost", "localhost.localdomain") or host.endswith(".localhost")


def url_host(host: str) -> str:
    """`host` as it goes into a URL (IPv6 literals in brackets)."""
    return f"[{host}]" if ":" in host else host


def bind_socket(host: str, port: int, *, what: str) -> socket.socket:
    """A TCP socket bound to host:port with TCP_NODELAY; a clear error when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # uvloop and asyncio set TCP_NODELAY on every accepted socket as well (checked on uvloop
    # 0.23); without it a write after a write would wait on the client's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HarnessError(
            f"cannot bind {what} to {host}:{port}: {exc}; choose another port (0 picks a free one)"
        ) from exc
    return sock


class ThreadedServer:
    """Serves `app` on an already bound socket until `stop()`. `what` names it in errors."""

    def __init__(
        self, app: Any, sock: socket.socket, *, what: str, thread_name: str,
        start_timeout_s: float = 10.0, http: Any = None, options: dict[str, Any] | None = None,
    ) -> None:
        """`options`: more `uvicorn.Config` arguments (TLS files, `timeout_keep_alive`)."""
        self.app = app
        self.what = what
        self.port: int = sock.getsockname()[1]
        self._sock = sock
        self._thread_name = thread_name
        self._start_timeout_s = start_timeout_s
        self._http = http
        self._options = dict(options or {})
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start serving; return once requests are accepted (or raise, stopped again)."""
        import uvicorn

        if self._thread is not None:
            raise HarnessError(f"{self.what} is already started")
        options = {"http": self._http} if self._http is not None else {}
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=5, **options, **self._options)
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [self._sock]},
                                        name=self._thread_name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise HarnessError(
                    f"{self.what} did not start within {self._start_timeout_s} s; raise its start "
                    "timeout on a loaded machine, or check the log for the error"
                )
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop serving and join the thread. Safe to call twice."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None
        self._sock.close()
