"""What every route shares: the gateway context, body limits, the session key, error mapping.

Each wire answers errors in its own shape; `errors_as(shape)` maps the harness's exceptions to
HTTP statuses once: unknown or finished key 401, expired session (idle TTL, lifetime) 401
`session_expired`, turn cap 429, taken session id 409, bad request
or unrenderable messages 400, body over the limit 413, sampler failure 502.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ..errors import RenderError, SamplingError
from .guard import FailedKeyLimiter
from .messages import WireError
from .passthrough import ChatBackend
from .rendering import Renderer
from .sampling import SamplingBackend
from .sessions import (
    Session,
    SessionClosedError,
    SessionError,
    SessionExistsError,
    SessionExpiredError,
    SessionStore,
    TurnLimitError,
    UnknownSessionError,
)
from .forcing import ScriptError
from .turn import ContextLengthError

try:  # optional: a faster JSON codec, used where its output is the same JSON
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]
ErrorShape = Callable[[int, str, str | None], dict[str, Any]]


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers


@dataclass
class GatewayContext:
    """What the routes work with (one per app)."""

    sessions: SessionStore
    sampler: SamplingBackend
    renderer: Renderer
    model_id: str
    admin_token: str
    max_body_bytes: int
    started: int
    context_window: int | None = None
    check_history: bool = True
    guard: FailedKeyLimiter | None = None
    background: set[asyncio.Task] = field(default_factory=set)
    chat: ChatBackend | None = None  # a hosted model every turn passes through (`passthrough.py`)


def status_of(exc: Exception) -> tuple[int, str | None]:
    if isinstance(exc, ApiError):
        return exc.status, exc.code
    if isinstance(exc, SessionExpiredError):
        return 401, "session_expired"
    if isinstance(exc, (UnknownSessionError, SessionClosedError)):
        return 401, "invalid_api_key"
    if isinstance(exc, TurnLimitError):
        return 429, "turn_limit_exceeded"
    if isinstance(exc, SessionExistsError):
        return 409, "conflict"
    if isinstance(exc, SamplingError):
        return 502, "sampling_failed"
    if isinstance(exc, (ContextLengthError, ScriptError)):
        return 400, exc.code
    return 400, None


def errors_as(shape: ErrorShape) -> Callable[[Handler], Handler]:
    """Route decorator: harness exceptions -> `shape(status, message, code)` JSON.

    Sampler failures (502) and unexpected exceptions (500) are the gateway's fault, not the
    agent's: they are counted as `gateway_errors` in the session's metadata so the runner can
    report the rollout as an infrastructure error rather than an agent error.
    """
    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            try:
                return await handler(request)
            except (ApiError, SessionError, RenderError, WireError, SamplingError, ContextLengthError,
                    ScriptError) as exc:
                status, code = status_of(exc)
                if isinstance(exc, SamplingError):
                    _count_gateway_error(request)
                message = f"sampling failed: {exc}" if isinstance(exc, SamplingError) else str(exc)
                return JSONResponse(shape(status, message, code), status, headers=getattr(exc, "headers", None))
            except ClientDisconnect:  # the client went away before its body arrived: nothing was recorded
                log.info("client disconnected before sending its whole request on %s", request.url.path)
                _count_event(request, "client_disconnects")
                return Response(status_code=400)  # never sent: the connection is gone
            except Exception as exc:  # a gateway bug: answer in the wire's shape, keep the trace
                log.exception("internal gateway error on %s", request.url.path)
                _count_gateway_error(request)
                message = f"internal gateway error: {type(exc).__name__}: {exc}"
                return JSONResponse(shape(500, message, "internal_error"), 500)
        return wrapped
    return decorate


def _count_gateway_error(request: Request) -> None:
    _count_event(request, "gateway_errors")


def _count_event(request: Request, event: str) -> None:
    context = getattr(request.app.state, "gateway", None)
    if context is None:
        return
    try:
        context.sessions.get(api_key(request)).count_event(event)
    except (ApiError, SessionError):
        return  # no usable session key: nothing to attribute the error to


async def read_json(request: Request, limit: int, *, check_depth: bool = True) -> Any:
    """The body as JSON (`parse_json`); with `check_depth=False` the caller checks the nesting of
    what it has not checked before (`check_nesting`)."""
    body = await read_body(request, limit)
    if not body:
        return {}
    return parse_json(body, check_depth=check_depth)


async def read_body(request: Request, limit: int) -> bytes:
    """The body's bytes, or a 413 past `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes "
                            "(GatewayConfig.max_body_bytes)", code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        if not chunk:
            continue  # starlette ends the stream with b"": joined, a one-chunk body would be copied
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes "
                                "(GatewayConfig.max_body_bytes)", code="request_too_large")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # a body in one chunk: not copied


MAX_JSON_DEPTH = 64


def parse_json(body: bytes | bytearray, *, check_depth: bool = True) -> Any:
    """A request body as JSON, or a 400: not JSON, nested deeper than `MAX_JSON_DEPTH`, or a
    string holding a lone surrogate (`"\\ud800"`, valid JSON that no tokenizer can encode).
    `check_depth=False`: the nesting is left to the caller (`check_nesting`), except for a body
    only the standard parser reads, which is checked here in full."""
    if orjson is not None:
        try:  # orjson refuses lone surrogates itself
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the standard parser decides (it accepts NaN and big ints) and words the error
        else:
            return check_nesting(value) if check_depth else value
    try:
        value = json.loads(body)
    except RecursionError as exc:
        raise ApiError(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    return _shallow(value, check_text=True)


def check_nesting(value: Any) -> Any:
    """`value` (parsed by orjson), or a 400 when it is nested deeper than `MAX_JSON_DEPTH`."""
    return _shallow(value, check_text=False)


def _shallow(value: Any, *, check_text: bool) -> Any:
    """`value`, after checking its depth (and its strings, when `check_text`) without recursion."""
    level = [value]
    for depth in range(MAX_JSON_DEPTH + 1):
        below = []
        for item in level:
            if isinstance(item, dict):
                if check_text:
                    below.extend(item.keys())
                below.extend(item.values())
            elif isinstance(item, list):
                below.extend(item)
            elif check_text and isinstance(item, str) and not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ApiError(400, f"request body holds a string with a lone surrogate "
                                        f"({exc.object[exc.start:exc.end]!r}); send valid Unicode "
                                        "(UTF-16 surrogates only in pairs)") from exc
        if not below:
            return value
        level = [item for item in below if check_text or isinstance(item, (dict, list))]
    raise ApiError(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels; flatten it")


class FastJSONResponse(JSONResponse):
    """`JSONResponse` through orjson when installed (same JSON for str/int/bool/None/list/dict
    content; floats are written by each in its own shortest form)."""

    def render(self, content: Any) -> bytes:
        if orjson is not None:
            try:
                return orjson.dumps(content)
            except TypeError:
                pass
        return super().render(content)


def api_key(request: Request) -> str:
    """The session key: `Authorization: Bearer <key>` or `X-Api-Key: <key>`."""
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer ") and authorization[7:].strip():
        return authorization[7:].strip()
    key = request.headers.get("x-api-key", "").strip()
    if not key:
        raise ApiError(401, "missing API key: send the session key as 'Authorization: Bearer <key>' "
                            "or 'X-Api-Key: <key>'", code="invalid_api_key")
    return key


def peer_of(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def check_peer(context: GatewayContext, request: Request) -> None:
    """429 when this peer has presented too many keys the gateway never issued (see `guard.py`)."""
    if context.guard is None:
        return
    wait = context.guard.retry_after(peer_of(request))
    if wait is not None:
        raise ApiError(429, f"too many failed key attempts from {peer_of(request)}; retry in {wait:.0f} s",
                       code="too_many_failed_keys", headers={"Retry-After": str(max(1, round(wait)))})


def failed_key(context: GatewayContext, request: Request) -> None:
    if context.guard is not None:
        context.guard.failed(peer_of(request))


def session_of(context: GatewayContext, request: Request) -> Session:
    """The session whose key the request carries; unknown keys count against the peer."""
    check_peer(context, request)
    try:
        return context.sessions.get(api_key(request))
    except UnknownSessionError:
        failed_key(context, request)
        raise


def validated(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, f"invalid request body: {describe(exc, data)}") from exc


def describe(exc: ValidationError, data: Any, *, limit: int = 5) -> str:
    """pydantic's errors as `where: what (got value)`, e.g. `messages[1].tool_calls: Input
    should be a valid list (got 'x')`; at most `limit` of them. `where` follows `data`, leaving
    out the union members pydantic names on its way."""
    lines = []
    errors = exc.errors(include_url=False)
    if len(errors) > 1:  # `str | list[...]` fields: the list branch's error is the one that helps
        errors = [e for e in errors if not (e["type"] == "string_type" and isinstance(e.get("input"), list))] or errors
    for error in errors[:limit]:
        where, node, loc = "", data, error["loc"]
        for index, part in enumerate(loc):
            if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
                where, node = f"{where}[{part}]", node[part]
            elif isinstance(part, str) and isinstance(node, dict) and (part in node or index == len(loc) - 1):
                where, node = f"{where}.{part}", node.get(part)
        got = repr(error.get("input"))
        got = got if len(got) <= 80 else got[:77] + "..."
        lines.append(f"{where.lstrip('.') or 'body'}: {error['msg']} (got {got})")
    more = len(errors) - len(lines)
    return "; ".join(lines) + (f"; and {more} more" if more > 0 else "")
