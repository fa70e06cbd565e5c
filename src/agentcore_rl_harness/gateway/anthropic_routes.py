"""Anthropic routes: `POST /v1/messages` (JSON and SSE) and `POST /v1/messages/count_tokens`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import anthropic_wire
from .messages import check_history, new_id
from .openai_routes import prepared_turn, sampled, streamed
from .openai_wire import reply_tool_calls
from .routing import GatewayContext, errors_as, read_json, session_of, validated
from .turn import RequestedSampling

TOOL_RESULT = "a tool_result block's tool_use_id"


def anthropic_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    return anthropic_wire.error_json(status, message)


def anthropic_routes(context: GatewayContext) -> dict[str, Any]:
    @errors_as(anthropic_error)
    async def messages(request: Request) -> Response:
        session = session_of(context, request)
        body = validated(anthropic_wire.MessagesRequest, await read_json(request, context.max_body_bytes))
        requested = RequestedSampling(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                                      max_tokens=body.max_tokens, stop=tuple(body.stop_sequences or ()))
        prepared = prepared_turn(context, session=session,
                                 messages=anthropic_wire.to_internal(body.system, body.messages),
                                 tools=anthropic_wire.tools_to_internal(body.tools), requested=requested,
                                 result=TOOL_RESULT)
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
        body = validated(anthropic_wire.CountTokensRequest, await read_json(request, context.max_body_bytes))
        messages = anthropic_wire.to_internal(body.system, body.messages)
        if context.check_history:
            check_history(messages, result=TOOL_RESULT)
        plan = session.plan(messages, anthropic_wire.tools_to_internal(body.tools))
        return JSONResponse({"input_tokens": len(plan.prompt_token_ids)})

    return {"/v1/messages": messages, "/v1/messages/count_tokens": count_tokens}
