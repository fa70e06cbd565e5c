"""The gateway's HTTP routes (Starlette): OpenAI chat completions, models, health, admin API.

The session key is the agent's API key (`Authorization: Bearer <key>` or `X-Api-Key`). Admin
routes need the `X-Admin-Token` header. Errors are OpenAI-shaped: `{"error": {message, type, code}}`.
"""

from __future__ import annotations

import functools
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import RenderError, SamplingError
from ..records import SamplingParams
from . import openai_wire as wire
from .rendering import Renderer
from .sampling import SamplingBackend
from .sessions import SessionClosedError, SessionError, SessionExistsError, SessionStore, UnknownSessionError
from .turn import RequestedSampling, run_turn


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type, code


class AdminSampling(BaseModel):
    """`sampling` of `POST /admin/sessions`; `stop` holds token ids or single-token strings."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop: list[int | str] = []
    seed: int | None = None


class OpenSessionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    sampling: AdminSampling | None = None


Handler = Callable[[Request], Awaitable[Response]]


def _errors_as_json(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return JSONResponse(wire.error_json(exc.message, type=exc.type, code=exc.code), exc.status)
        except (UnknownSessionError, SessionClosedError) as exc:
            return JSONResponse(wire.error_json(str(exc), type="invalid_request_error",
                                                code="invalid_api_key"), 401)
        except SessionExistsError as exc:
            return JSONResponse(wire.error_json(str(exc), type="invalid_request_error", code="conflict"), 409)
        except (SessionError, RenderError) as exc:
            return JSONResponse(wire.error_json(str(exc), type="invalid_request_error"), 400)
        except SamplingError as exc:
            return JSONResponse(wire.error_json(f"sampling failed: {exc}", type="server_error"), 502)
    return wrapped


async def _read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes")
    try:
        return json.loads(body) if body else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc


def _api_key(request: Request) -> str:
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    key = request.headers.get("x-api-key", "").strip()
    if not key:
        raise ApiError(401, "missing API key: send the session key as 'Authorization: Bearer <key>'",
                       code="invalid_api_key")
    return key


def _validated(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, f"invalid request body: {exc}") from exc


def create_app(
    *, sessions: SessionStore, sampler: SamplingBackend, renderer: Renderer, model_id: str,
    admin_token: str, max_body_bytes: int,
) -> Starlette:
    """Build the gateway's ASGI app over a session store, a sampler and a renderer."""
    started = int(time.time())

    def require_admin(request: Request) -> None:
        given = request.headers.get("x-admin-token", "")
        if not secrets.compare_digest(given.encode(), admin_token.encode()):
            raise ApiError(401, "admin routes need the X-Admin-Token header of this gateway",
                           code="invalid_admin_token")

    @_errors_as_json
    async def chat_completions(request: Request) -> Response:
        session = sessions.get(_api_key(request))
        body = _validated(wire.ChatCompletionRequest, await _read_json(request, max_body_bytes))
        if body.n not in (None, 1):
            raise ApiError(400, f"n={body.n} is not supported: send one request per sample")
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        requested = RequestedSampling(
            temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
            max_tokens=body.max_completion_tokens or body.max_tokens, stop=stop,
        )
        result = await run_turn(session=session, sampler=sampler, renderer=renderer,
                                messages=body.messages, tools=body.tools, requested=requested)
        completion_id, created = wire.new_completion_id(), int(time.time())
        call_ids = wire.new_tool_call_ids(len(result.reply.tool_calls))
        finish = wire.finish_reason(result.reply, result.sampled_finish)
        if not body.stream:
            return JSONResponse(wire.completion_json(
                completion_id=completion_id, created=created, model=model_id, reply=result.reply,
                call_ids=call_ids, finish=finish, usage=result.usage))
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        events = wire.stream_events(
            completion_id=completion_id, created=created, model=model_id, reply=result.reply,
            call_ids=call_ids, finish=finish, usage=result.usage if include_usage else None)
        return StreamingResponse(iter(events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def models(request: Request) -> Response:
        return JSONResponse(wire.models_json(model_id, started))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": model_id, "open_sessions": len(sessions)})

    @_errors_as_json
    async def open_session(request: Request) -> Response:
        require_admin(request)
        body = _validated(OpenSessionBody, await _read_json(request, max_body_bytes))
        sampling = None if body.sampling is None else _sampling_params(body.sampling, renderer)
        session_id = sessions.open(session_id=body.session_id, sampling=sampling)
        return JSONResponse({"session_id": session_id}, 201)

    @_errors_as_json
    async def finish_session(request: Request) -> Response:
        require_admin(request)
        try:
            finished = sessions.finish(request.path_params["session_id"])
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc), code="session_not_found") from exc
        except SessionClosedError as exc:
            raise ApiError(409, str(exc), code="session_finished") from exc
        return JSONResponse(finished.to_json())

    @_errors_as_json
    async def delete_session(request: Request) -> Response:
        require_admin(request)
        try:
            sessions.delete(request.path_params["session_id"])
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc), code="session_not_found") from exc
        return Response(status_code=204)

    return Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/admin/sessions", open_session, methods=["POST"]),
        Route("/admin/sessions/{session_id}/finish", finish_session, methods=["POST"]),
        Route("/admin/sessions/{session_id}", delete_session, methods=["DELETE"]),
    ])


def _sampling_params(sampling: AdminSampling, renderer: Renderer) -> SamplingParams:
    stop_ids = []
    for stop in sampling.stop:
        if isinstance(stop, int):
            stop_ids.append(stop)
            continue
        ids = renderer.encode(stop)
        if len(ids) != 1:
            raise ApiError(400, f"stop {stop!r} is {len(ids)} tokens; stops must be single tokens or token ids")
        stop_ids.append(ids[0])
    if sampling.max_tokens < 1 or sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.top_k < 0:
        raise ApiError(400, f"invalid sampling {sampling.model_dump()}: need max_tokens >= 1, "
                            "temperature >= 0, 0 < top_p <= 1, top_k >= 0")
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                          max_tokens=sampling.max_tokens, stop_token_ids=tuple(stop_ids), seed=sampling.seed)
