"""`TinkerServer`: the Tinker-compatible API under uvicorn on a background thread.

Runs in-process (tests, notebooks) or as `agentcore-rl tinker-server`. Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

from ..errors import HarnessError
from ..serving import ThreadedServer, bind_socket, url_host

log = logging.getLogger("agentcore_rl_harness.tinker_server")


class TinkerServer:
    """Serves `model` (a named model or a local HF folder) on `host:port` (0: a free port).

    `api_key`: when set, requests must carry it in `X-API-Key` (else 401). `checkpoint_dir`:
    where save_state / save_weights_for_sampler write (default: the harness cache).
    `poll_wait_s`: how long retrieve_future waits for a result before answering try_again.
    `session_timeout_s`: a session silent this long is finished and its models freed when the
    next session or model is created (None: never).
    """

    def __init__(self, model: str, *, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None,
                 checkpoint_dir: str | os.PathLike[str] | None = None, max_models: int = 4,
                 max_body_bytes: int = 64 * 1024 * 1024, poll_wait_s: float = 2.0,
                 start_timeout_s: float = 10.0, session_timeout_s: float | None = 120.0) -> None:
        self.model = model
        self.host = host
        self.requested_port = port
        self.api_key = api_key
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.max_models = max_models
        self.max_body_bytes = max_body_bytes
        self.poll_wait_s = poll_wait_s
        self.start_timeout_s = start_timeout_s
        self.session_timeout_s = session_timeout_s
        self.engine = None
        self.futures = None
        self._serving: ThreadedServer | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise HarnessError("the Tinker server is not started; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """What to pass as `tinker.ServiceClient(base_url=...)` (or TINKER_BASE_URL)."""
        return f"http://{url_host(self.host)}:{self.port}"

    @property
    def serving(self) -> bool:
        return self._serving is not None and self._serving.alive

    def start(self) -> "TinkerServer":
        """Load the model, bind, serve on a background thread; returns once requests are accepted."""
        from ..models import cache_dir, resolve_model
        from .app import create_app
        from .engine import Engine
        from .futures import FutureTable

        if self._serving is not None:
            raise HarnessError("the Tinker server is already started")
        checkpoint_root = self.checkpoint_dir or cache_dir() / "tinker-checkpoints"
        self.engine = Engine(model_name=self.model, model_path=resolve_model(self.model),
                             checkpoint_root=checkpoint_root, max_models=self.max_models)
        self.futures = FutureTable()
        sock = self._bind()
        app = create_app(engine=self.engine, futures=self.futures, api_key=self.api_key,
                         max_body_bytes=self.max_body_bytes, poll_wait_s=self.poll_wait_s,
                         session_timeout_s=self.session_timeout_s)
        self._serving = ThreadedServer(app, sock, what="the Tinker server",
                                       thread_name=f"tinker-server-{self._port}",
                                       start_timeout_s=self.start_timeout_s)
        try:
            self._serving.start()
        except HarnessError:
            self._serving = None
            raise
        log.info("Tinker API at %s (checkpoints in %s)", self.base_url, checkpoint_root)
        return self

    def _bind(self) -> socket.socket:
        sock = bind_socket(self.host, self.requested_port, what="the Tinker server")
        self._port = sock.getsockname()[1]
        return sock

    def stop(self) -> None:
        """Stop serving and the worker. Safe to call twice."""
        if self._serving is not None:
            self._serving.stop()
        if self.futures is not None:
            self.futures.close()
        self._serving, self.futures = None, None

    def __enter__(self) -> "TinkerServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def run_cli(*, model: str, host: str, port: int, api_key: str | None, checkpoint_dir: str | None,
            max_models: int, session_timeout_s: float | None = 120.0) -> None:
    """`agentcore-rl tinker-server`: serve until interrupted; prints the base URL on stdout."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s tinker-server %(levelname)s %(message)s")
    if api_key is not None and not api_key.startswith("tml-"):
        raise HarnessError(f"--api-key must start with 'tml-' (the tinker SDK refuses other keys), got {api_key[:4]!r}...")
    server = TinkerServer(model, host=host, port=port, api_key=api_key, checkpoint_dir=checkpoint_dir,
                          max_models=max_models, session_timeout_s=session_timeout_s)
    server.start()
    print(server.base_url, flush=True)
    try:
        while server.serving:
            time.sleep(0.5)
    finally:
        server.stop()
