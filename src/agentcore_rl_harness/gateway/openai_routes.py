"""OpenAI Chat Completions route: `POST /v1/chat/completions` (JSON and SSE), over `turn_routes.py`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from . import openai_wire
from .error_shapes import openai_error
from .known_history import plain_chat_message
from .messages import Message, chat_tools, new_id
from .replies import reply_tool_calls
from .routing import ApiError, FastJSONResponse, GatewayContext, errors_as, read_body, session_of
from .turn import RequestedSampling
from .turn_routes import WireRequest, prepared_turn, read_turn_request, sampled, streamed

__all__ = ["CHAT", "chat_request", "chat_routes", "openai_error"]

CHAT_RESULT = "a 'tool' message's tool_call_id"


def _translate(messages: Any, start: int) -> tuple[list[Message], list[int]]:
    internal = openai_wire.to_internal(messages, start=start)
    return internal, list(range(1, len(internal) + 1))


CHAT = WireRequest(name="chat", model=openai_wire.ChatCompletionRequest, key="messages",
                   messages=lambda body: body.messages, translate=_translate, plain=plain_chat_message,
                   result=CHAT_RESULT)


def chat_request(context: GatewayContext, session: Any, source: bytes | Any) -> tuple[Any, Sequence[Message]]:
    """The validated chat request and its internal messages, history checked (only what is new:
    `turn_routes.read_turn_request`)."""
    return read_turn_request(context, session, source, CHAT)


def chat_routes(context: GatewayContext) -> dict[str, Any]:
    @errors_as(openai_error)
    async def chat_completions(request: Request) -> Response:
        session = session_of(context, request)
        body, messages = chat_request(context, session, await read_body(request, context.max_body_bytes))
        if body.n not in (None, 1):
            raise ApiError(400, f"n={body.n} is not supported: send one request per sample")
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        requested = RequestedSampling(
            temperature=body.temperature, top_p=body.top_p, top_k=body.top_k, seed=body.seed,
            max_tokens=body.max_completion_tokens or body.max_tokens, stop=stop)
        prepared = prepared_turn(context, session=session, messages=messages, tools=chat_tools(body.tools),
                                 requested=requested)
        completion_id, created = new_id("chatcmpl-"), int(time.time())
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return streamed(context, prepared, openai_wire.ChatStream(
                completion_id=completion_id, created=created, model=context.model_id,
                include_usage=include_usage))
        result = await sampled(context, prepared)
        return FastJSONResponse(openai_wire.completion_json(
            completion_id=completion_id, created=created, model=context.model_id, result=result,
            calls=reply_tool_calls(result.reply)))

    return {"/v1/chat/completions": chat_completions}
