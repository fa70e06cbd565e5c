"""`agentcore-rl view`: check where to bind, then serve the viewer (or write a bundle).

Loopback is the default. Any other address needs a token (`--token T`, or `--token auto` for a
random one): the viewer shows agent output and configs, which may hold secrets.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from .links import DEFAULT_HOST, DEFAULT_PORT



@dataclass(frozen=True)
class ViewSettings:
    paths: tuple[Path, ...]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    tokenizer: Path | None = None


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError as exc:
        raise HarnessError(f"--host {host!r}: cannot resolve it ({exc})") from exc
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_bind(host: str, token: str | None) -> str | None:
    """The token to require (a generated one for `auto`); refuses a non-loopback bind without."""
    if token == "auto":
        token = secrets.token_urlsafe(18)
    if token is not None and len(token) < 8:
        raise HarnessError(f"--token is {len(token)} characters; use at least 8 (or --token auto)")
    if token is None and not is_loopback(host):
        raise HarnessError(
            f"--host {host} is not a loopback address and no --token was given: anyone who can "
            "reach it could read the runs. Add --token auto (a random token, printed in the URL) "
            "or --token YOUR_TOKEN, or bind --host 127.0.0.1")
    return token


def serve(settings: ViewSettings, *, announce: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; `announce` gets the URL to open (with the token, if any)."""
    import uvicorn

    from .app import Access, create_app
    from .runs import Catalog

    token = check_bind(settings.host, settings.token)
    catalog = Catalog(list(settings.paths))
    app = create_app(catalog, access=Access(token=token, loopback=token is None),
                     tokenizer=settings.tokenizer)
    family = socket.AF_INET6 if ":" in settings.host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host.strip("[]"), settings.port))
        sock.listen(128)  # connections wait in the backlog from the moment the URL is printed
    except OSError as exc:
        sock.close()
        raise HarnessError(f"cannot listen on {settings.host}:{settings.port} ({exc}); pass "
                           "--port 0 for any free port, or another --port") from exc
    threading.Thread(target=_warm_tokenizers, args=(catalog, settings.tokenizer), daemon=True,
                     name="viewer-tokenizers").start()
    port = sock.getsockname()[1]
    shown = f"[{settings.host.strip('[]')}]" if family == socket.AF_INET6 else settings.host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    runs = len(catalog.runs())
    announce = announce or (lambda line: print(line, flush=True))
    announce(f"agentcore-rl view: {runs} run{'s' if runs != 1 else ''} at {url}")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])


def _warm_tokenizers(catalog: Any, override: Path | None) -> None:
    """Load the runs' tokenizers while the user opens the first page (transformers' import
    takes seconds), so the first transcript does not wait for it."""
    from ..reports.tokenizer import find_tokenizer

    for run in catalog.runs():
        find_tokenizer(run.model_name(), override).pieces([0])
