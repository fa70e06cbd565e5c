"""The viewer's web app: Starlette routes over the pages, with the access rules in one place.

Access: bound to loopback, only loopback Host headers are served (a DNS-rebinding page cannot
read runs); bound elsewhere, a token is required on every request, given once in the URL
(`?token=...`, then kept in an HttpOnly same-site cookie). The one route that serves files
serves regular files inside the run directory only.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (FileResponse, HTMLResponse, JSONResponse, PlainTextResponse,
                                 RedirectResponse, Response)
from starlette.routing import Route

from ..errors import HarnessError
from .index import Filter
from .inflight import read_inflight
from .pages import cells, compare_page, rollout_page, run_page, runs_page
from .runs import Catalog, Run

PAGE_ROWS = 100
TOKEN_COOKIE = "agentcore_rl_view"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}


@dataclass(frozen=True)
class Access:
    """Who may read: `token` None means loopback only (checked by the Host header)."""

    token: str | None
    loopback: bool


class _Guard(BaseHTTPMiddleware):
    def __init__(self, app: Any, access: Access) -> None:
        super().__init__(app)
        self.access = access

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        host = host_name(request.headers.get("host") or "")
        if self.access.loopback and host not in LOOPBACK_HOSTS:
            return PlainTextResponse(f"host {host!r} refused: this viewer serves loopback only",
                                     status_code=403)
        given = request.query_params.get("token")
        if self.access.token is not None:
            cookie = request.cookies.get(TOKEN_COOKIE, "")
            if not any(hmac.compare_digest(value.encode(), self.access.token.encode())
                       for value in (given or "", cookie)):
                return PlainTextResponse(
                    "a token is required: open the URL `agentcore-rl view` printed "
                    "(it ends in ?token=...)", status_code=401)
        response = await call_next(request)
        response.headers.update(HEADERS)
        if self.access.token is not None and given:
            response.set_cookie(TOKEN_COOKIE, self.access.token, httponly=True, samesite="strict")
        return response


def host_name(header: str) -> str:
    """The host of a Host header, without its port (`[::1]:80` -> `[::1]`)."""
    if header.startswith("["):
        return header[:header.find("]") + 1]
    return header.rsplit(":", 1)[0]


def create_app(catalog: Catalog, *, access: Access, tokenizer: Path | None = None) -> Starlette:
    """The viewer over `catalog`'s runs."""

    def run_of(request: Request) -> Run:
        try:
            return catalog.get(request.path_params["key"])
        except KeyError:
            raise _NotFound(f"run {request.path_params['key']!r} is not open in this viewer; "
                            "start `agentcore-rl view` on its directory or on its parent") from None

    def number_of(request: Request) -> int:
        text = request.path_params["number"]
        if not text.isdigit():
            raise _NotFound(f"rollout {text!r}: give the rollout's number in the table")
        return int(text)

    def query_of(request: Request) -> tuple[Filter, int]:
        params = request.query_params
        try:
            query = Filter(task=params.get("task", ""), phase=params.get("phase", ""),
                           status=params.get("status", ""), outcome=params.get("outcome") or "all",
                           search=params.get("q", ""))
            start = int(params.get("start") or 0)
        except (HarnessError, ValueError) as exc:
            raise _BadRequest(f"bad filter: {exc}") from exc
        return query, max(0, start)

    def index(request: Request) -> Response:
        return HTMLResponse(runs_page(catalog.runs(), mode="server"))

    def run_redirect(request: Request) -> Response:
        return RedirectResponse(f"/run/{quote(request.path_params['key'])}/index.html", 307)

    def run(request: Request) -> Response:
        query, start = query_of(request)
        return HTMLResponse(run_page(run_of(request), query, start=start, limit=PAGE_ROWS,
                                     mode="server"))

    def rows(request: Request) -> Response:
        chosen = run_of(request)
        query, _ = query_of(request)
        after = int(request.query_params.get("after") or 0)
        total = chosen.index.refresh()
        new = [row for row in chosen.index.rows()[after:] if query.matches(row)]
        inflight = read_inflight(chosen.run_dir)
        return JSONResponse({"total": total, "live": chosen.live(),
                             "inflight": inflight.payload() if inflight else None, "rows": [
            {"number": row.number, "cells": cells(row), "failed": row.failed, "demo": row.demo}
            for row in new]})

    def rollout(request: Request) -> Response:
        chosen, number = run_of(request), number_of(request)
        chosen.index.refresh()
        try:
            token_start = max(0, int(request.query_params.get("tokens") or 0))
        except ValueError as exc:
            raise _BadRequest(f"tokens={request.query_params['tokens']!r} is not a number") from exc
        return HTMLResponse(rollout_page(chosen, _known(chosen, number), tokenizer_dir=tokenizer,
                                         token_start=token_start, mode="server"))

    def compare(request: Request) -> Response:
        chosen, number = run_of(request), number_of(request)
        chosen.index.refresh()
        return HTMLResponse(compare_page(chosen, _known(chosen, number), tokenizer_dir=tokenizer,
                                         mode="server"))

    def session(request: Request) -> Response:
        chosen = run_of(request)
        chosen.index.refresh()
        wanted = request.path_params["session_id"]
        found = [row for row in chosen.index.rows() if row.session_id == wanted]
        if not found:
            raise _NotFound(f"no rollout of run {chosen.key!r} has session {wanted!r}")
        return RedirectResponse(f"/run/{quote(chosen.key)}/rollout/{found[-1].number}.html", 307)

    def files(request: Request) -> Response:
        chosen = run_of(request)
        return FileResponse(safe_file(chosen.run_dir, request.path_params["path"]))

    routes = [
        Route("/", index), Route("/index.html", index),
        Route("/run/{key}", run_redirect), Route("/run/{key}/", run),
        Route("/run/{key}/index.html", run), Route("/run/{key}/rows.json", rows),
        Route("/run/{key}/rollout/{number}.html", rollout),
        Route("/run/{key}/compare/{number}.html", compare),
        Route("/run/{key}/session/{session_id}", session),
        Route("/run/{key}/files/{path:path}", files),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_Guard, access=access)],
                     exception_handlers={_NotFound: _error(404), _BadRequest: _error(400),
                                         _Refused: _error(403), HarnessError: _error(404)})


def _known(run: Run, number: int) -> int:
    if number >= run.index.refresh():
        raise _NotFound(f"run {run.key!r} has {run.index.refresh()} rollouts; there is no #{number}")
    return number


def safe_file(run_dir: Path, relative: str) -> Path:
    """`relative` inside `run_dir` as a regular file; anything that leaves the directory (`..`,
    an absolute path, a symlink out) is refused."""
    root = run_dir.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root) or relative.startswith("/"):
        raise _Refused(f"{relative!r} is outside the run directory; only its own files are served")
    if not target.is_file():
        raise _NotFound(f"{relative!r}: no such file in {root}")
    return target


class _NotFound(HarnessError):
    pass


class _BadRequest(HarnessError):
    pass


class _Refused(HarnessError):
    pass


def _error(status: int) -> Any:
    async def handle(request: Request, exc: Exception) -> Response:
        return PlainTextResponse(str(exc), status_code=status, headers=HEADERS)
    return handle
