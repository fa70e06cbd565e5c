"""The internal message form every wire translates to, and helpers shared by the wires. Pure.

Internal messages are OpenAI-chat-shaped dicts, the same for the same conversation on any wire:

    {"role": "system" | "user", "content": str}
    {"role": "assistant", "content": str, "reasoning"?: str,
     "tool_calls"?: [{"id": str, "type": "function", "function": {"name": str, "arguments": str}}]}
    {"role": "tool", "tool_call_id": str, "content": str}

`arguments` is canonical JSON text (`json.dumps(value, ensure_ascii=False)`) when it parses, else
the text as sent; `reasoning` and `tool_calls` are present only when non-empty. Internal tools are
`{"type": "function", "function": {"name", "description"?, "parameters"}}`.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import HarnessError

Message = dict[str, Any]
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class WireError(HarnessError):
    """A request cannot be translated (unsupported content, malformed items): HTTP 400."""


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def canonical_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        if len(arguments) <= CANONICAL_CACHE_MAX_CHARS:
            return _canonical_text(arguments)
        return _canonical_text.__wrapped__(arguments)
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


# Every turn re-sends the history's tool-call arguments: short ones are canonicalised once.
CANONICAL_CACHE_MAX_CHARS = 2048


@functools.lru_cache(maxsize=4096)
def _canonical_text(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False) if arguments.strip() else "{}"
    except json.JSONDecodeError:
        return arguments


def text_of(content: Any, *, where: str, kinds: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    """Text of a string or a list of text parts; anything else is a `WireError`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in kinds and isinstance(part.get("text", ""), str):
                parts.append(part.get("text", ""))
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise WireError(f"{where}: content part of type {kind!r} is not supported; the gateway "
                                "trains a text model and accepts text parts only")
        return "".join(parts)
    raise WireError(f"{where}: content must be a string or a list of text parts, got {type(content).__name__}")


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": canonical_arguments(arguments)}}


def assistant(content: str, *, reasoning: str | None = None,
              tool_calls: list[dict[str, Any]] | None = None) -> Message:
    message: Message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def function_tool(name: Any, description: Any, parameters: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise WireError(f"{where}: every tool needs a non-empty string name")
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = str(description)
    function["parameters"] = dict(parameters) if isinstance(parameters, Mapping) else EMPTY_SCHEMA
    return {"type": "function", "function": function}


def check_history(messages: Sequence[Message], *, result: str, checked: int = 0) -> None:
    """Every tool result answers a call of the assistant message right before it, once, as the
    OpenAI and Anthropic APIs require (they answer 400 otherwise); `result` names the wire's
    tool result and its id field (e.g. "a tool_result block's tool_use_id"). `checked`: the
    first messages passed this check before (in an earlier request); the check resumes at the
    last non-tool message among them, where its state starts afresh."""
    start = next((i for i in range(min(checked, len(messages)) - 1, -1, -1)
                  if messages[i]["role"] != "tool"), 0)
    open_calls: set[str] | None = None  # unanswered call ids of the assistant message before
    for index in range(start, len(messages)):  # by index: a long run is not walked from its start
        message = messages[index]
        role = message["role"]
        if role == "assistant":
            open_calls = {call["id"] for call in message.get("tool_calls") or ()}
        elif role == "tool":
            call_id = message["tool_call_id"]
            if not open_calls or call_id not in open_calls:
                asked = (f"the assistant message before it called {sorted(open_calls)}" if open_calls
                         else "no assistant tool call (still unanswered) comes right before it")
                raise WireError(f"{result} {call_id!r} answers no tool call: {asked}. Send each tool "
                                "result right after the assistant message that made the call, with its id")
            open_calls.discard(call_id)
        else:
            open_calls = None


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """OpenAI chat tools -> internal tools (extra keys like `strict` dropped)."""
    if not tools:
        return None
    internal = []
    for tool in tools:
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise WireError(f"tools: only function tools are supported, got {tool!r:.200}")
        function = tool.get("function") or {}
        internal.append(function_tool(function.get("name"), function.get("description"),
                                      function.get("parameters"), where="tools"))
    return internal
