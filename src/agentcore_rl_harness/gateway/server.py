"""`GatewayServer`: the gateway app under uvicorn on a background thread (works from sync code).

Listeners. The wires listen on `config.host:config.port`, over TLS when `tls.certfile` and
`tls.keyfile` are set. The admin API (`/admin/sessions...`, whose token opens and reads every
session) is served on that listener only when it is loopback; otherwise (or with
`separate_admin=True`) it gets its own listener on 127.0.0.1:`admin_port` (`admin_url`), so it
is never reachable from the network.

Keep-alive. Connections idle for `keep_alive_s` (75 s by default, uvicorn's own default is 5 s)
are closed by the server. A client must never send on a connection the server is closing at the
same moment, so the server's idle timeout has to outlive the clients': httpx (and so the openai
and anthropic SDKs) keeps idle connections 5 s, aiohttp 15 s, AWS load balancers 60 s by default
(set an ALB's idle timeout below `keep_alive_s`).

A reaper thread closes sessions past their idle TTL or lifetime every `reap_interval_s` (see
`SessionStore.reap_expired`); their traces wait in `sessions.reaped()` / `sessions.finish`.
"""

from __future__ import annotations

import gc
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from types import TracebackType

from ..errors import HarnessError
from ..records import SamplingParams
from ..serving import ThreadedServer, bind_socket, is_loopback, url_host
from .app import create_app
from .config import GatewayConfig
from .passthrough import ChatBackend
from .rendering import Renderer
from .sampling import SamplingBackend
from .sessions import SessionStore

class GatewayServer:
    """Serves the gateway on `config.host:config.port` (port 0: a free port) until `stop()`."""

    def __init__(
        self, *, sampler: SamplingBackend, renderer: Renderer, model_id: str,
        config: GatewayConfig = GatewayConfig(), sampling: SamplingParams = SamplingParams(),
        context_window_tokens: int | None = None, admin_token: str | None = None,
        clock: Callable[[], float] = time.monotonic, chat: ChatBackend | None = None,
    ) -> None:
        """`sampling` is what the trainer decodes with (it wins over what agents send);
        `context_window_tokens` the model's context (None: unknown, unchecked): a prompt filling
        it is a 400 `context_length_exceeded`, a turn's `max_tokens` is lowered to the room left.
        `clock` times the session limits (a test can pass a fake one). `chat`: a hosted model every
        turn passes through instead of `sampler` (`passthrough.py`; no tokens are captured)."""
        self.config = config
        self.model_id = model_id
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.sessions = SessionStore(renderer=renderer, default_sampling=sampling,
                                     limits=config.limits(), history=config.history, clock=clock)
        self.app = create_app(
            sessions=self.sessions, sampler=sampler, renderer=renderer, model_id=model_id,
            admin_token=self.admin_token, max_body_bytes=config.max_body_bytes,
            context_window=context_window_tokens, lenient_history=config.lenient_history,
            admin_on_public=not config.admin_apart, failed_key_limit=config.failed_key_limit, chat=chat,
        )
        self._serving: ThreadedServer | None = None
        self._admin_serving: ThreadedServer | None = None
        self._port: int | None = None
        self._reaper: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def port(self) -> int:
        if self._port is None:
            raise HarnessError("the gateway is not started; call start() first")
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ending in `/v1` (https when serving TLS)."""
        scheme = "https" if self.config.tls.certfile else "http"
        return f"{scheme}://{url_host(self.config.host)}:{self.port}/v1"

    @property
    def admin_url(self) -> str:
        """Where the admin API is served (`.../admin/sessions`): the loopback admin listener, or
        the wires' listener when that is loopback."""
        if self._admin_serving is None:
            return self.base_url.removesuffix("/v1")
        return f"http://127.0.0.1:{self._admin_serving.port}"

    def start(self) -> "GatewayServer":
        """Bind, start serving on a background thread, and return once requests are accepted."""
        from .http import CoalescingHttpProtocol

        if self._serving is not None:
            raise HarnessError("the gateway is already started")
        options = {"timeout_keep_alive": self.config.keep_alive_s}
        tls = _tls_files(self.config)
        sock = bind_socket(self.config.host, self.config.port, what="the gateway")
        self._port = sock.getsockname()[1]
        if self.config.gc_freeze:
            gc.collect()
            gc.freeze()
        self._serving = ThreadedServer(self.app, sock, what="the gateway", http=CoalescingHttpProtocol,
                                       thread_name=f"gateway-{self._port}",
                                       start_timeout_s=self.config.start_timeout_s, options={**options, **tls})
        try:
            self._serving.start()
            if self.config.admin_apart:
                admin_sock = bind_socket("127.0.0.1", self.config.admin_port, what="the gateway's admin API")
                self._admin_serving = ThreadedServer(
                    self.app.state.admin_app, admin_sock, what="the gateway's admin API",
                    thread_name=f"gateway-admin-{self._port}", start_timeout_s=self.config.start_timeout_s,
                    options=options)
                self._admin_serving.start()
        except HarnessError:
            self.stop()
            raise
        if self.config.idle_ttl_s is not None or self.config.max_lifetime_s is not None:
            self._stopping.clear()
            self._reaper = threading.Thread(target=self._reap, name=f"gateway-reaper-{self._port}",
                                            daemon=True)
            self._reaper.start()
        return self

    def _reap(self) -> None:
        while not self._stopping.wait(self.config.reap_interval_s):
            self.sessions.reap_expired()

    def stop(self) -> None:
        """Stop serving and join the threads. Safe to call twice."""
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join(timeout=10)
            self._reaper = None
        for serving in (self._serving, self._admin_serving):
            if serving is not None:
                serving.stop()
        self._serving, self._admin_serving = None, None

    def __enter__(self) -> "GatewayServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def _tls_files(config: GatewayConfig) -> dict[str, str]:
    """uvicorn's TLS options, after checking the files load (a bad file is an error here, not a
    server thread that never starts)."""
    if not config.tls.certfile and not config.tls.keyfile:
        return {}
    if not (config.tls.certfile and config.tls.keyfile):
        raise HarnessError("TLS needs both gateway.tls.certfile and gateway.tls.keyfile (PEM files)")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(config.tls.certfile, config.tls.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise HarnessError(f"cannot load the gateway's TLS certificate {config.tls.certfile!r} / key "
                           f"{config.tls.keyfile!r}: {exc}; give PEM files of a matching pair") from exc
    return {"ssl_certfile": config.tls.certfile, "ssl_keyfile": config.tls.keyfile}
