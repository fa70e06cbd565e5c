"""OpenAI Responses route: `POST /v1/responses` (JSON and SSE), over `turn_routes.py`.

A request that continues a stored response (`previous_response_id`) sends only its new items:
the stored conversation is reused as the objects kept, and only the new items are translated.
A request that re-sends its whole history (`input` items) takes the known-history path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import responses_wire
from .error_shapes import openai_error
from .messages import check_history, new_id
from .replies import reply_message, reply_tool_calls
from .routing import ApiError, GatewayContext, errors_as, read_body, session_of
from .turn import RequestedSampling, TurnResult
from .turn_routes import WireRequest, prepared_turn, read_turn_request, sampled, streamed

__all__ = ["RESPONSES", "responses_routes"]

FUNCTION_CALL_OUTPUT = "a function_call_output item's call_id"


def _usable(body: Any) -> bool:
    """A whole history re-sent as items (not one string, not continuing a stored response)."""
    return isinstance(body.get("input"), list) and body.get("previous_response_id") is None


RESPONSES = WireRequest(
    name="responses", model=responses_wire.ResponsesRequest, key="input", messages=lambda body: body.input,
    translate=responses_wire.items_to_internal, plain=responses_wire.plain_item, result=FUNCTION_CALL_OUTPUT,
    head=lambda body: body.get("instructions"), head_internal=responses_wire.instructions_to_internal,
    usable=_usable)


def responses_routes(context: GatewayContext) -> dict[str, Any]:
    @errors_as(openai_error)
    async def responses(request: Request) -> Response:
        session = session_of(context, request)
        body, messages = read_turn_request(context, session, await read_body(request, context.max_body_bytes),
                                           RESPONSES)
        if body.previous_response_id is not None:
            messages = _continued(session, body, messages)
            if context.check_history:
                check_history(messages, result=FUNCTION_CALL_OUTPUT)
        requested = RequestedSampling(temperature=body.temperature, top_p=body.top_p,
                                      max_tokens=body.max_output_tokens)
        prepared = prepared_turn(context, session=session, messages=messages,
                                 tools=responses_wire.tools_to_internal(body.tools), requested=requested)
        response_id, created = new_id("resp_"), int(time.time())

        def remember(result: TurnResult, calls: list[dict[str, Any]]) -> None:
            session.remember_response(response_id, messages, reply_message(result.reply, calls))

        if body.stream:
            return streamed(context, prepared, responses_wire.ResponsesStream(
                response_id=response_id, created=created, model=context.model_id, request=body,
                on_done=remember))
        result = await sampled(context, prepared)
        calls = reply_tool_calls(result.reply)
        remember(result, calls)
        status = responses_wire.status_of(result)
        output = responses_wire.output_items(reply_message(result.reply, calls), status=status)
        return JSONResponse(responses_wire.response_json(
            response_id=response_id, created=created, model=context.model_id, output=output,
            status=status, result=result, request=body))

    return {"/v1/responses": responses}


def _continued(session: Any, body: Any, messages: Sequence[Any]) -> tuple[Any, ...]:
    """The stored conversation of `previous_response_id`, then this request's messages (its
    instructions first: they are per request, not carried over)."""
    earlier = session.recall_response(body.previous_response_id)
    if earlier is None:
        raise ApiError(404, f"previous_response_id {body.previous_response_id!r} is not a "
                            "response of this session", code="previous_response_not_found")
    if body.instructions:
        earlier = tuple(m for m in earlier if m["role"] != "system")
        return (messages[0], *earlier, *messages[1:])
    return (*earlier, *messages)
