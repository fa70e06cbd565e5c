"""The gateway's ASGI app (Starlette): the wires, the model list, health, and the admin API.

Wires: OpenAI chat completions (`openai_routes.py`) and responses (`responses_routes.py`),
Anthropic messages (`anthropic_routes.py`), siblings over `turn_routes.py`; each answers errors in
its own shape. The session key is the agent's API
key (`Authorization: Bearer <key>` or `X-Api-Key`). Admin routes need the `X-Admin-Token` header
and answer errors OpenAI-shaped: `{"error": {message, type, code}}`.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..records import SamplingParams
from . import openai_wire
from .anthropic_routes import anthropic_routes
from .error_shapes import openai_error
from .openai_routes import chat_routes
from .passthrough import ChatBackend
from .rendering import Renderer
from .responses_routes import responses_routes
from .guard import FailedKeyLimiter
from .routing import ApiError, GatewayContext, check_peer, errors_as, failed_key, read_json, validated
from .sampling import SamplingBackend
from .sessions import SessionClosedError, SessionStore, UnknownSessionError

__all__ = ["AdminSampling", "ApiError", "create_app"]


class AdminSampling(BaseModel):
    """`sampling` of `POST /admin/sessions`; `stop` holds token ids or single-token strings."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = SamplingParams.temperature
    top_p: float = SamplingParams.top_p
    top_k: int = SamplingParams.top_k
    max_tokens: int = SamplingParams.max_tokens
    stop: list[int | str] = []
    seed: int | None = None


class OpenSessionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    sampling: AdminSampling | None = None
    script: list[dict[str, Any]] | None = None  # assistant turns to teacher-force (forcing.py)


def create_app(
    *, sessions: SessionStore, sampler: SamplingBackend, renderer: Renderer, model_id: str,
    admin_token: str, max_body_bytes: int, context_window: int | None = None,
    lenient_history: bool = False, admin_on_public: bool = True, failed_key_limit: int | None = 30,
    chat: ChatBackend | None = None,
) -> Starlette:
    """Build the gateway's ASGI app over a session store, a sampler and a renderer.

    `context_window`: the model's context in tokens (None: unknown, not checked). A prompt that
    fills it is a 400 `context_length_exceeded`, and an admin session's `max_tokens` above it is
    refused. `lenient_history`: accept tool results that answer no call (see
    `messages.check_history`), which the real APIs refuse. `admin_on_public`: serve the admin
    routes on this app too; they are always in `app.state.admin_app` (for a loopback-only
    listener). `failed_key_limit`: unknown keys or wrong admin tokens per peer per minute before
    that peer gets 429s (None: no limit; see `guard.py`). `chat`: a hosted model every turn passes
    through, capturing no tokens (`passthrough.py`; evaluation baselines).
    """
    context = GatewayContext(sessions=sessions, sampler=sampler, renderer=renderer, model_id=model_id,
                             admin_token=admin_token, max_body_bytes=max_body_bytes,
                             started=int(time.time()), context_window=context_window,
                             check_history=not lenient_history, chat=chat,
                             guard=None if failed_key_limit is None else FailedKeyLimiter(limit=failed_key_limit))

    def require_admin(request: Request) -> None:
        check_peer(context, request)
        given = request.headers.get("x-admin-token", "")
        if not secrets.compare_digest(given.encode(), admin_token.encode()):
            failed_key(context, request)
            raise ApiError(401, "admin routes need the X-Admin-Token header of this gateway",
                           code="invalid_admin_token")

    async def models(request: Request) -> Response:
        return JSONResponse(openai_wire.models_json(model_id, context.started))

    @errors_as(openai_error)
    async def model(request: Request) -> Response:
        if request.path_params["model_id"] != model_id:
            raise ApiError(404, f"model {request.path_params['model_id']!r} is not served here; "
                                f"this gateway serves {model_id!r}", code="model_not_found")
        return JSONResponse(openai_wire.models_json(model_id, context.started)["data"][0])

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": model_id, "open_sessions": len(sessions)})

    @errors_as(openai_error)
    async def open_session(request: Request) -> Response:
        require_admin(request)
        body = validated(OpenSessionBody, await read_json(request, max_body_bytes))
        sampling = None if body.sampling is None else _sampling_params(body.sampling, renderer, context_window)
        forced = {} if body.script is None else {"script": body.script}
        session_id = sessions.open(session_id=body.session_id, sampling=sampling, **forced)
        return JSONResponse({"session_id": session_id}, 201)

    @errors_as(openai_error)
    async def finish_session(request: Request) -> Response:
        require_admin(request)
        try:
            finished = sessions.finish(request.path_params["session_id"])
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc), code="session_not_found") from exc
        except SessionClosedError as exc:
            raise ApiError(409, str(exc), code="session_finished") from exc
        return JSONResponse(finished.to_json())

    @errors_as(openai_error)
    async def delete_session(request: Request) -> Response:
        require_admin(request)
        try:
            sessions.delete(request.path_params["session_id"])
        except UnknownSessionError as exc:
            raise ApiError(404, str(exc), code="session_not_found") from exc
        return Response(status_code=204)

    wires = {**chat_routes(context), **responses_routes(context), **anthropic_routes(context)}
    admin = [
        Route("/admin/sessions", open_session, methods=["POST"]),
        Route("/admin/sessions/{session_id}/finish", finish_session, methods=["POST"]),
        Route("/admin/sessions/{session_id}", delete_session, methods=["DELETE"]),
    ]
    health_route = Route("/health", health, methods=["GET"])
    app = Starlette(routes=[
        *(Route(path, handler, methods=["POST"]) for path, handler in wires.items()),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        health_route,
        *(admin if admin_on_public else ()),
    ])
    app.state.gateway = context
    app.state.admin_app = Starlette(routes=[*admin, health_route])
    app.state.admin_app.state.gateway = context
    return app


def _sampling_params(sampling: AdminSampling, renderer: Renderer, context_window: int | None) -> SamplingParams:
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
    if context_window is not None and sampling.max_tokens >= context_window:
        raise ApiError(400, f"sampling.max_tokens={sampling.max_tokens} does not fit the model's context "
                            f"window of {context_window} tokens; ask for at most {context_window - 1} (each "
                            "turn is further limited to the room its prompt leaves)",
                       code="max_tokens_exceeds_context")
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                          max_tokens=sampling.max_tokens, stop_token_ids=tuple(stop_ids), seed=sampling.seed)
