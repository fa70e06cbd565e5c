"""OpenAI Chat Completions wire: request model, messages <-> internal form, JSON, SSE chunks. Pure.

Streaming sends one role chunk, `reasoning_content` and `content` deltas as tokens are sampled,
then every tool call (each with its own `index`, an id-and-name chunk then an arguments chunk),
the finish chunk, the usage chunk when `stream_options.include_usage`, and `data: [DONE]`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from ..records import Usage
from .error_shapes import error_json
from .messages import Message, WireError, assistant, canonical_arguments, text_of, tool_call
from .schemas import CHAT_SHAPE, check_shape
from .rendering import ParsedReply
from .replies import reply_message, reply_tool_calls
from .streaming import Delta, sse
from .turn import TurnResult

DONE = "data: [DONE]\n\n"


class ChatCompletionRequest(BaseModel):
    """The fields the gateway reads; any other field is accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_the_published_shape(cls, data: Any) -> Any:
        return check_shape(CHAT_SHAPE, data)


def to_internal(messages: Sequence[Mapping[str, Any]], *, start: int = 0) -> list[Message]:
    """Chat messages -> internal messages (see `messages.py`), one per message; `start`: the
    index of the first in the request (errors name it)."""
    internal = []
    for index, message in enumerate(messages, start):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise WireError(f"{where} needs a string 'role'")
        role = "system" if message["role"] == "developer" else message["role"]
        content = text_of(message.get("content"), where=where)
        if role == "assistant":
            calls = [tool_call(str(call.get("id") or ""), str((call.get("function") or {}).get("name", "")),
                               (call.get("function") or {}).get("arguments", "{}"))
                     for call in message.get("tool_calls") or ()]
            reasoning = message.get("reasoning_content", message.get("reasoning"))
            internal.append(assistant(content, reasoning=reasoning if isinstance(reasoning, str) else None,
                                      tool_calls=calls))
        elif role == "tool":
            internal.append({"role": "tool", "tool_call_id": str(message.get("tool_call_id") or ""),
                             "content": content})
        elif role in ("system", "user"):
            internal.append({"role": role, "content": content})
        else:
            raise WireError(f"{where}: unsupported role {message['role']!r}")
    return internal


def from_internal(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Internal messages -> chat messages as a client would send them."""
    chat = []
    for message in messages:
        if message["role"] != "assistant":
            chat.append(dict(message))
            continue
        out: dict[str, Any] = {"role": "assistant", "content": message["content"]}
        if message.get("tool_calls"):
            out["content"] = message["content"] or None
            out["tool_calls"] = [dict(call) for call in message["tool_calls"]]
        if message.get("reasoning"):
            out["reasoning_content"] = message["reasoning"]
        chat.append(out)
    return chat


def finish_reason(reply: ParsedReply, sampled_finish: str) -> str:
    """OpenAI's finish_reason: `length` if cut off, `tool_calls` if it called tools, else `stop`."""
    if sampled_finish == "length":
        return "length"
    return "tool_calls" if reply.tool_calls else "stop"


def usage_json(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def completion_json(*, completion_id: str, created: int, model: str, result: TurnResult,
                    calls: list[dict[str, Any]]) -> dict[str, Any]:
    (message,) = from_internal([reply_message(result.reply, calls)])
    return {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(result.reply, result.sampled_finish)}],
        "usage": usage_json(result.usage),
    }


class ChatStream:
    """The Chat Completions SSE grammar for one streamed turn (a `streaming.WireStream`)."""

    def __init__(self, *, completion_id: str, created: int, model: str, include_usage: bool) -> None:
        self._head = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                      "model": model}
        self._include_usage = include_usage

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        return sse({**self._head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                               "logprobs": None}]})

    def start(self) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, delta: Delta) -> list[str]:
        field = "reasoning_content" if delta.kind == "reasoning" else "content"
        return [self._chunk({field: delta.text})]

    def finish(self, result: TurnResult) -> list[str]:
        events = []
        for index, call in enumerate(reply_tool_calls(result.reply)):
            head = {"index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}
            events.append(self._chunk({"tool_calls": [head]}))
            events.append(self._chunk({"tool_calls": [
                {"index": index, "function": {"arguments": call["function"]["arguments"]}}]}))
        events.append(self._chunk({}, finish_reason(result.reply, result.sampled_finish)))
        if self._include_usage:
            events.append(sse({**self._head, "choices": [], "usage": usage_json(result.usage)}))
        return [*events, DONE]

    def error(self, status: int, message: str) -> list[str]:
        return [sse(error_json(message, type="server_error" if status >= 500 else "invalid_request_error"))]


def models_json(model_id: str, created: int) -> dict[str, Any]:
    """A model list both SDKs parse (OpenAI's `object`/`owned_by`, Anthropic's `type`/`display_name`)."""
    created_at = datetime.datetime.fromtimestamp(created, datetime.timezone.utc)
    entry = {"id": model_id, "object": "model", "created": created, "owned_by": "agentcore-rl",
             "type": "model", "display_name": model_id,
             "created_at": created_at.isoformat().replace("+00:00", "Z")}
    return {"object": "list", "data": [entry], "has_more": False, "first_id": model_id, "last_id": model_id}


__all__ = ["DONE", "ChatCompletionRequest", "ChatStream", "canonical_arguments", "completion_json",
           "error_json", "finish_reason", "from_internal", "models_json", "reply_message",
           "reply_tool_calls", "sse", "to_internal", "usage_json"]
