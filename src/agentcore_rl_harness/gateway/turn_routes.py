"""What every wire's route does with a turn: read the request (its known history compared, only
what is new checked and translated), plan the turn, sample it as JSON or as a stream.

The three wires (`openai_routes.py` chat completions, `responses_routes.py`, `anthropic_routes.py`)
are siblings over this module; each describes itself with a `WireRequest`: where its messages
are in the body, what heads them (Anthropic `system`, Responses `instructions`), how it
translates a run of them, and when equality of parsed JSON may be trusted (`known_history.py`).
`read_turn_request` then serves every wire the same way: a long session costs the same per turn
at turn 200 as at turn 10, and a request is refused with the words a fresh session would use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response, StreamingResponse

from .known_history import NOTHING_KNOWN, Known
from .messages import Message, WireError, check_history
from .routing import ApiError, GatewayContext, check_nesting, parse_json, validated
from .streaming import WireStream, stream_turn
from .tokens import TokenRun
from .turn import PreparedTurn, RequestedSampling, TurnResult, prepare_turn, sample_turn

__all__ = ["SSE_HEADERS", "WireRequest", "prepared_turn", "read_turn_request", "sampled", "streamed"]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

# (the request's messages from index `start` on, `start`) -> (their internal messages, and per
# message how many internal messages the run made up to it, None where a known part may not end)
Translate = Callable[[Sequence[Any], int], tuple[list[Message], list[int | None]]]


def _no_head(body: Any) -> None:
    return None


def _nothing(head: Any) -> list[Message]:
    return []


def _always(body: Any) -> bool:
    return True


@dataclass(frozen=True)
class WireRequest:
    """How one wire's request carries its history (see the module docstring)."""

    name: str  # the wire's name in the session's known history
    model: type[BaseModel]  # the validated request
    key: str  # the body's top-level array of messages (items)
    messages: Callable[[Any], Any]  # the validated request's messages (items)
    translate: Translate
    plain: Callable[[Any], bool]  # a raw message whose equality (==) decides its translation
    result: str  # the wire's tool result and its id field, for `check_history`'s error
    head: Callable[[Any], Any] = _no_head  # the raw head (Anthropic `system`) of a parsed body (a dict)
    head_internal: Callable[[Any], list[Message]] = _nothing  # the head's internal messages
    usable: Callable[[Any], bool] = _always  # a parsed body (a dict) whose history may be known


def read_turn_request(context: GatewayContext, session: Any, source: bytes | Any,
                      wire: WireRequest) -> tuple[Any, Sequence[Message]]:
    """The validated request and its internal messages, history checked, from the body's bytes
    (or its parsed JSON). The messages this session's earlier requests on `wire` already checked
    and translated (`known_history.py`) are compared, not parsed (when their bytes are the
    same), checked or translated again; a refused request is refused with the words a fresh
    session would use."""
    history, data = session.known_history, None
    split = history.split(wire.name, source, wire.key) if isinstance(source, bytes) else None
    if split is not None:
        known, tail = split
        if not wire.usable(tail) or wire.head(tail) != known.head:
            split = None
    if split is None:
        data = source if not isinstance(source, bytes) else parse_json(source, check_depth=False) if source else {}
        raw = data.get(wire.key) if isinstance(data, dict) else None
        known = history.match(wire.name, raw, wire.head(data)) \
            if isinstance(raw, list) and wire.usable(data) else NOTHING_KNOWN
        tail = {**data, wire.key: raw[known.count:]} if known.count else data
    try:
        body, internal, bounds = _checked(context, wire, tail, known)
    except (ApiError, WireError):
        if not known.count:
            raise
        known = NOTHING_KNOWN  # the whole request, as a fresh session sees it, says why
        tail = data if data is not None else parse_json(source, check_depth=False)
        body, internal, bounds = _checked(context, wire, tail, known)
    raw = wire.messages(body)
    if isinstance(raw, list) and wire.usable(tail):
        history.remember(wire.name, known, TokenRun.of(known.raw).extended(raw), internal, wire.plain,
                         body=source if isinstance(source, bytes) else None, key=wire.key,
                         head=wire.head(tail), bounds=bounds)
    return body, internal


def _checked(context: GatewayContext, wire: WireRequest, data: Any,
             known: Known) -> tuple[Any, TokenRun, TokenRun]:
    """`data` (the request without its `known` messages) depth-checked, validated, translated and
    history-checked: the request, the internal messages of the whole request, and their bounds
    (per count of raw messages, `known_history.py`); both runs extend the known ones in place
    (`tokens.TokenRun`), so a turn costs its new messages only, however long the history."""
    check_nesting(data)
    body = validated(wire.model, data)
    raw = wire.messages(body)
    if known.count:
        before = TokenRun.of(known.internal)
        bounds = TokenRun.of(known.bounds if known.bounds is not None else range(known.count + 1))
    else:
        before = TokenRun.of(wire.head_internal(wire.head(data)))
        bounds = TokenRun.of([len(before)])
    added, ends = wire.translate(raw, known.count)  # Responses `input` may be one string
    bounds = bounds.extended([None if end is None else end + len(before) for end in ends])
    internal = before.extended(added)
    if context.check_history and wire.usable(data):  # else the route checks what it assembles
        check_history(internal, result=wire.result, checked=len(known.internal))
    return body, internal, bounds


def prepared_turn(context: GatewayContext, *, session: Any, messages: Sequence[Message], tools: Any,
                  requested: RequestedSampling) -> PreparedTurn:
    """Plan the turn (its history checked already)."""
    return prepare_turn(session=session, renderer=context.renderer, messages=messages, tools=tools,
                        requested=requested, context_window=context.context_window)


async def sampled(context: GatewayContext, prepared: PreparedTurn) -> TurnResult:
    return await sample_turn(prepared, sampler=context.sampler, renderer=context.renderer, chat=context.chat)


def streamed(context: GatewayContext, prepared: PreparedTurn, wire: WireStream) -> Response:
    events = stream_turn(prepared, sampler=context.sampler, renderer=context.renderer, wire=wire,
                         background=context.background, chat=context.chat)
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
