"""Anthropic routes: `POST /v1/messages` (JSON and SSE) and `POST /v1/messages/count_tokens`,
over `turn_routes.py`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import anthropic_wire
from .messages import new_id
from .replies import reply_tool_calls
from .routing import GatewayContext, errors_as, read_body, session_of
from .turn import RequestedSampling
from .turn_routes import WireRequest, prepared_turn, read_turn_request, sampled, streamed

__all__ = ["MESSAGES", "anthropic_routes"]

TOOL_RESULT = "a tool_result block's tool_use_id"

MESSAGES = WireRequest(
    name="anthropic", model=anthropic_wire.MessagesRequest, key="messages", messages=lambda body: body.messages,
    translate=anthropic_wire.messages_to_internal, plain=anthropic_wire.plain_message, result=TOOL_RESULT,
    head=lambda body: body.get("system"), head_internal=anthropic_wire.system_to_internal)
# count_tokens asks about the next turn's prompt: its own known history, so that a count does
# not push the turns' requests out of theirs
COUNT_TOKENS = WireRequest(
    name="anthropic count_tokens", model=anthropic_wire.CountTokensRequest, key="messages",
    messages=lambda body: body.messages, translate=anthropic_wire.messages_to_internal,
    plain=anthropic_wire.plain_message, result=TOOL_RESULT, head=lambda body: body.get("system"),
    head_internal=anthropic_wire.system_to_internal)


def anthropic_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    return anthropic_wire.error_json(status, message)


def anthropic_routes(context: GatewayContext) -> dict[str, Any]:
    @errors_as(anthropic_error)
    async def messages(request: Request) -> Response:
        session = session_of(context, request)
        body, internal = read_turn_request(context, session, await read_body(request, context.max_body_bytes),
                                           MESSAGES)
        requested = RequestedSampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                                      max_tokens=body.max_tokens, stop=tuple(body.stop_sequences or ()))
        prepared = prepared_turn(context, session=session, messages=internal,
                                 tools=anthropic_wire.tools_to_internal(body.tools), requested=requested)
        message_id = new_id("msg_")
        if body.stream:
            return streamed(context, prepared, anthropic_wire.MessagesStream(
                message_id=message_id, model=context.model_id, prompt_tokens=prepared.prompt_tokens))
        result = await sampled(context, prepared)
        return JSONResponse(anthropic_wire.message_json(
            message_id=message_id, model=context.model_id, result=result,
            calls=reply_tool_calls(result.reply, prefix="toolu_")))

    @errors_as(anthropic_error)
    async def count_tokens(request: Request) -> Response:
        """The prompt the next turn would really use (sampled tokens reused), counted."""
        session = session_of(context, request)
        body, internal = read_turn_request(context, session, await read_body(request, context.max_body_bytes),
                                           COUNT_TOKENS)
        plan = session.plan(internal, anthropic_wire.tools_to_internal(body.tools))
        return JSONResponse({"input_tokens": len(plan.prompt_token_ids)})

    return {"/v1/messages": messages, "/v1/messages/count_tokens": count_tokens}
