"""OpenAI routes: `POST /v1/chat/completions` and `POST /v1/responses` (JSON and SSE)."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from . import openai_wire, responses_wire
from .known_history import NOTHING_KNOWN, Known, plain_chat_message
from .messages import Message, WireError, chat_tools, check_history, new_id
from .routing import (
    ApiError,
    FastJSONResponse,
    GatewayContext,
    check_nesting,
    errors_as,
    parse_json,
    read_body,
    read_json,
    session_of,
    validated,
)
from .streaming import WireStream, stream_turn
from .turn import PreparedTurn, RequestedSampling, TurnResult, prepare_turn, sample_turn

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def openai_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(status, "invalid_request_error")
    return openai_wire.error_json(message, type="server_error" if status >= 500 else kind, code=code)


def streamed(context: GatewayContext, prepared: PreparedTurn, wire: WireStream) -> Response:
    events = stream_turn(prepared, sampler=context.sampler, renderer=context.renderer, wire=wire,
                         background=context.background)
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


CHAT_RESULT = "a 'tool' message's tool_call_id"


def prepared_turn(context: GatewayContext, *, session: Any, messages: list[Message], tools: Any,
                  requested: RequestedSampling, result: str | None) -> PreparedTurn:
    """Check the history (unless `gateway.lenient_history`, or `result` is None: checked
    already), then plan the turn."""
    if context.check_history and result is not None:
        check_history(messages, result=result)
    return prepare_turn(session=session, renderer=context.renderer, messages=messages, tools=tools,
                        requested=requested, context_window=context.context_window)


def chat_request(context: GatewayContext, session: Any, source: bytes | Any) -> tuple[Any, list[Message]]:
    """The validated chat request and its internal messages, history checked, from the body's
    bytes (or its parsed JSON). The messages this session's earlier requests already checked and
    translated (`known_history.py`) are compared, not parsed (when their bytes are the same),
    checked or translated again; a refused request is refused with the words a fresh session
    would use."""
    history = session.known_history
    split = history.split("chat", source) if isinstance(source, bytes) else None
    if split is not None:
        known, tail = split
    else:
        data = source if not isinstance(source, bytes) else parse_json(source, check_depth=False) if source else {}
        raw = data.get("messages") if isinstance(data, dict) else None
        known = history.match("chat", raw) if isinstance(raw, list) else NOTHING_KNOWN
        tail = {**data, "messages": raw[known.count:]} if known.count else data
    try:
        body, internal = _checked_chat(context, tail, known)
    except (ApiError, WireError):
        if not known.count:
            raise
        known = NOTHING_KNOWN  # the whole request, as a fresh session sees it, says why
        tail = data if split is None else parse_json(source, check_depth=False)
        body, internal = _checked_chat(context, tail, known)
    raw = [*known.raw, *tail["messages"]]
    history.remember("chat", known, raw, internal, plain_chat_message,
                     body=source if isinstance(source, bytes) else None)
    return body, internal


def _checked_chat(context: GatewayContext, data: Any, known: Known) -> tuple[Any, list[Message]]:
    """`data` (the request without its `known` messages) depth-checked, validated, translated and
    history-checked, and the internal messages of the whole request."""
    check_nesting(data)
    body = validated(openai_wire.ChatCompletionRequest, data)
    internal = [*known.internal, *openai_wire.to_internal(body.messages, start=known.count)]
    if context.check_history:
        check_history(internal, result=CHAT_RESULT, checked=known.count)
    return body, internal


async def sampled(context: GatewayContext, prepared: PreparedTurn) -> TurnResult:
    return await sample_turn(prepared, sampler=context.sampler, renderer=context.renderer)


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
                                 requested=requested, result=None)
        completion_id, created = new_id("chatcmpl-"), int(time.time())
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return streamed(context, prepared, openai_wire.ChatStream(
                completion_id=completion_id, created=created, model=context.model_id,
                include_usage=include_usage))
        result = await sampled(context, prepared)
        return FastJSONResponse(openai_wire.completion_json(
            completion_id=completion_id, created=created, model=context.model_id, result=result,
            calls=openai_wire.reply_tool_calls(result.reply)))

    @errors_as(openai_error)
    async def responses(request: Request) -> Response:
        session = session_of(context, request)
        body = validated(responses_wire.ResponsesRequest, await read_json(request, context.max_body_bytes))
        messages = responses_wire.to_internal(body.input, body.instructions)
        if body.previous_response_id is not None:
            earlier = session.recall_response(body.previous_response_id)
            if earlier is None:
                raise ApiError(404, f"previous_response_id {body.previous_response_id!r} is not a "
                                    "response of this session", code="previous_response_not_found")
            if body.instructions:  # instructions are per request, not carried over
                earlier = tuple(m for m in earlier if m["role"] != "system")
                messages = [messages[0], *earlier, *messages[1:]]
            else:
                messages = [*earlier, *messages]
        requested = RequestedSampling(temperature=body.temperature, top_p=body.top_p,
                                      max_tokens=body.max_output_tokens)
        prepared = prepared_turn(context, session=session, messages=messages,
                                 tools=responses_wire.tools_to_internal(body.tools), requested=requested,
                                 result="a function_call_output item's call_id")
        response_id, created = new_id("resp_"), int(time.time())

        def remember(result: TurnResult, calls: list[dict[str, Any]]) -> None:
            reply = openai_wire.reply_message(result.reply, calls)
            session.remember_response(response_id, [*messages, reply])

        if body.stream:
            return streamed(context, prepared, responses_wire.ResponsesStream(
                response_id=response_id, created=created, model=context.model_id, request=body,
                on_done=remember))
        result = await sampled(context, prepared)
        calls = openai_wire.reply_tool_calls(result.reply)
        remember(result, calls)
        status = responses_wire.status_of(result)
        output = responses_wire.output_items(openai_wire.reply_message(result.reply, calls), status=status)
        return JSONResponse(responses_wire.response_json(
            response_id=response_id, created=created, model=context.model_id, output=output,
            status=status, result=result, request=body))

    return {"/v1/chat/completions": chat_completions, "/v1/responses": responses}
