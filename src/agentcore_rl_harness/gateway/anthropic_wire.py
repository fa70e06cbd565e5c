"""Anthropic Messages wire (`POST /v1/messages`): messages <-> internal form, JSON, SSE. Pure.

`system` (a string or text blocks) is a leading system message. A message with role `system` inside
`messages` (Claude Code sends one; the published API has no such role) is a system message in its
place, its text blocks joined, as a system message on the chat and Responses wires is: the same
conversation gives the same internal messages, so the same tokens, on every wire. Kept in place,
it renders as the template renders a system turn there, and every later request, which re-sends
it where it was, starts with the same tokens, so the trace extends. Folding it into `system` would
rewrite the head whenever one arrives mid-session (the next prompt no longer starts with the last
one: a new row), and folding it into a user turn would invent the text that joins them. A user message's `tool_result`
blocks become `tool` messages, followed by one user message with its text blocks if it has any;
an assistant message's `thinking`, `text` and `tool_use` blocks become one assistant message
(`reasoning`, `content`, `tool_calls`). Going back, tool messages and the user message right after
them share one user message, as the API requires.

Streaming (every event with its `event:` line): message_start, then per content block
content_block_start, content_block_delta (thinking_delta + signature_delta, text_delta,
input_json_delta), content_block_stop; message_delta (stop_reason, output usage), message_stop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .known_history import text_leaves_only
from .messages import Message, WireError, assistant, function_tool, text_of, tool_call
from .replies import reply_tool_calls
from .schemas import ANTHROPIC_SHAPE, check_shape
from .streaming import Delta
from .turn import TurnResult

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
               429: "rate_limit_error", 502: "api_error", 529: "overloaded_error"}


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_the_published_shape(cls, data: Any) -> Any:
        return check_shape(ANTHROPIC_SHAPE, data)


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_the_published_shape(cls, data: Any) -> Any:
        return check_shape(ANTHROPIC_SHAPE, data)


def tools_to_internal(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    internal = []
    for tool in tools:
        if not isinstance(tool, Mapping) or tool.get("type", "custom") != "custom":
            raise WireError(f"tools: only client tools with an input_schema are supported, got {tool!r:.200}")
        internal.append(function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"),
                                      where="tools"))
    return internal


def tools_from_internal(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        function = tool["function"]
        entry = {"name": function["name"], "input_schema": function["parameters"]}
        if "description" in function:
            entry["description"] = function["description"]
        out.append(entry)
    return out


def _blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(block, Mapping) for block in content):
        raise WireError(f"{where}: content must be a string or a list of content blocks")
    return content


def to_internal(system: Any, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Anthropic system + messages -> internal messages (see `messages.py`)."""
    return [*system_to_internal(system), *messages_to_internal(messages)[0]]


def system_to_internal(system: Any) -> list[Message]:
    """The request's `system` -> a leading system message (none when it has no text)."""
    system_text = text_of(system, where="system")
    return [{"role": "system", "content": system_text}] if system_text else []


def messages_to_internal(messages: Sequence[Mapping[str, Any]], start: int = 0) -> tuple[list[Message], list[int]]:
    """Anthropic messages -> internal messages, and after each message how many there are (each
    message translates on its own); `start`: the index of the first in the request (errors
    name it)."""
    internal: list[Message] = []
    ends: list[int] = []
    for index, message in enumerate(messages, start):
        _message_to_internal(message, f"messages[{index}]", internal)
        ends.append(len(internal))
    return internal, ends


def plain_message(message: Any) -> bool:
    """A message whose equality (==) as parsed JSON decides its translation: text leaves only,
    and tool_use inputs whose objects have one key at most (their key order is the arguments')."""
    if not text_leaves_only(message) or not isinstance(message, Mapping):
        return False
    content = message.get("content")
    return not isinstance(content, list) or all(
        text_leaves_only(block.get("input"), keys=1) for block in content
        if isinstance(block, Mapping) and block.get("type") == "tool_use")


def _message_to_internal(message: Any, where: str, internal: list[Message]) -> None:
    role = message.get("role") if isinstance(message, Mapping) else None
    if role not in ("user", "assistant", "system"):
        raise WireError(f"{where}: role must be 'user', 'assistant' or 'system', got {role!r}")
    blocks = _blocks(message.get("content"), where)
    if role == "system":
        kinds = [block.get("type") for block in blocks if block.get("type") != "text"]
        if kinds:
            raise WireError(f"{where}: system content block {kinds[0]!r} is not supported (text blocks only; "
                            "send tool results and tool calls in user and assistant messages)")
        internal.append({"role": "system", "content": "".join(str(block.get("text", "")) for block in blocks)})
        return
    if role == "assistant":
        reasoning, texts, calls = [], [], []
        for block in blocks:
            kind = block.get("type")
            if kind == "thinking":
                reasoning.append(str(block.get("thinking", "")))
            elif kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_use":
                calls.append(tool_call(str(block.get("id", "")), str(block.get("name", "")),
                                       block.get("input") or {}))
            elif kind != "redacted_thinking":
                raise WireError(f"{where}: assistant content block {kind!r} is not supported")
        internal.append(assistant("".join(texts), reasoning="".join(reasoning) or None, tool_calls=calls))
        return
    texts, has_text = [], False
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            internal.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                             "content": text_of(block.get("content"), where=f"{where} tool_result")})
        elif kind == "text":
            texts.append(str(block.get("text", "")))
            has_text = True
        else:
            raise WireError(f"{where}: user content block {kind!r} is not supported (text and "
                            "tool_result only)")
    if has_text or not blocks:
        internal.append({"role": "user", "content": "".join(texts)})


def from_internal(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Internal messages -> (system, messages) as a client would send them."""
    system = None
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["content"], messages[1:]
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] | None = None  # tool_result blocks of the current user message
    for message in messages:
        role = message["role"]
        if role == "tool":
            if pending is None:
                pending = []
                out.append({"role": "user", "content": pending})
            pending.append({"type": "tool_result", "tool_use_id": message["tool_call_id"],
                            "content": message["content"]})
        elif role == "user" and pending is not None:
            pending.append({"type": "text", "text": message["content"]})
            pending = None
        elif role == "user":
            out.append({"role": "user", "content": message["content"]})
        elif role == "assistant":
            pending = None
            out.append({"role": "assistant", "content": content_blocks(message)})
        elif role == "system":
            pending = None
            out.append({"role": "system", "content": message["content"]})
        else:
            raise WireError(f"a {role!r} message cannot be sent on the Anthropic wire")
    return system, out


def content_blocks(message: Message) -> list[dict[str, Any]]:
    """An internal assistant message -> Anthropic content blocks."""
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning"):
        blocks.append({"type": "thinking", "thinking": message["reasoning"], "signature": ""})
    if message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"]["arguments"])
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise WireError(f"tool call arguments {call['function']['arguments']!r:.100} are not a JSON object")
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": arguments})
    return blocks


def stop_reason(result: TurnResult) -> str:
    if result.sampled_finish == "length":
        return "max_tokens"
    return "tool_use" if result.reply.tool_calls else "end_turn"


def message_json(*, message_id: str, model: str, result: TurnResult,
                 calls: list[dict[str, Any]]) -> dict[str, Any]:
    reply = assistant(result.reply.content, reasoning=result.reply.reasoning, tool_calls=calls)
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content_blocks(reply), "stop_reason": stop_reason(result), "stop_sequence": None,
            "usage": {"input_tokens": result.usage.prompt_tokens, "output_tokens": result.usage.completion_tokens}}


def error_json(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _event(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


class MessagesStream:
    """The Anthropic Messages SSE grammar for one streamed turn (a `streaming.WireStream`)."""

    def __init__(self, *, message_id: str, model: str, prompt_tokens: int) -> None:
        self._message = {"id": message_id, "type": "message", "role": "assistant", "model": model,
                         "content": [], "stop_reason": None, "stop_sequence": None,
                         "usage": {"input_tokens": prompt_tokens, "output_tokens": 0}}
        self._index = -1
        self._open: str | None = None

    def start(self) -> list[str]:
        return [_event("message_start", {"message": self._message})]

    def _start_block(self, block: dict[str, Any]) -> list[str]:
        events = self._stop_block()
        self._index += 1
        self._open = block["type"]
        return [*events, _event("content_block_start", {"index": self._index, "content_block": block})]

    def _stop_block(self) -> list[str]:
        if self._open is None:
            return []
        events = []
        if self._open == "thinking":
            events.append(_event("content_block_delta", {"index": self._index, "delta": {
                "type": "signature_delta", "signature": ""}}))
        self._open = None
        return [*events, _event("content_block_stop", {"index": self._index})]

    def delta(self, delta: Delta) -> list[str]:
        kind = "thinking" if delta.kind == "reasoning" else "text"
        events = []
        if self._open != kind:
            empty = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else \
                {"type": "text", "text": ""}
            events += self._start_block(empty)
        payload = {"type": "thinking_delta", "thinking": delta.text} if kind == "thinking" else \
            {"type": "text_delta", "text": delta.text}
        return [*events, _event("content_block_delta", {"index": self._index, "delta": payload})]

    def finish(self, result: TurnResult) -> list[str]:
        events = []
        for call in reply_tool_calls(result.reply, prefix="toolu_"):
            events += self._start_block({"type": "tool_use", "id": call["id"],
                                         "name": call["function"]["name"], "input": {}})
            events.append(_event("content_block_delta", {"index": self._index, "delta": {
                "type": "input_json_delta", "partial_json": call["function"]["arguments"]}}))
        events += self._stop_block()
        return [*events,
                _event("message_delta", {"delta": {"stop_reason": stop_reason(result), "stop_sequence": None},
                                         "usage": {"output_tokens": result.usage.completion_tokens}}),
                _event("message_stop", {})]

    def error(self, status: int, message: str) -> list[str]:
        return [_event("error", {"error": error_json(status, message)["error"]})]
