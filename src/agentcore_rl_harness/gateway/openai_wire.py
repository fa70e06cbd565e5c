"""OpenAI Chat Completions wire format: the request model, response JSON, SSE chunks. Pure."""

from __future__ import annotations

import json
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..records import Usage
from .rendering import ParsedReply

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


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def new_tool_call_ids(count: int) -> list[str]:
    return ["call_" + secrets.token_hex(12) for _ in range(count)]


def finish_reason(reply: ParsedReply, sampled_finish: str) -> str:
    """OpenAI's finish_reason: `length` if cut off, `tool_calls` if it called tools, else `stop`."""
    if sampled_finish == "length":
        return "length"
    return "tool_calls" if reply.tool_calls else "stop"


def _tool_calls(reply: ParsedReply, call_ids: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": call_id, "type": "function",
         "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
        for call_id, call in zip(call_ids, reply.tool_calls, strict=True)
    ]


def assistant_message(reply: ParsedReply, call_ids: list[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["content"] = reply.content or None
        message["tool_calls"] = _tool_calls(reply, call_ids)
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    return message


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def completion_json(
    *, completion_id: str, created: int, model: str, reply: ParsedReply, call_ids: list[str],
    finish: str, usage: Usage,
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": assistant_message(reply, call_ids),
                     "finish_reason": finish, "logprobs": None}],
        "usage": usage_json(usage),
    }


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _chunk(completion_id: str, created: int, model: str, delta: dict[str, Any],
           finish: str | None = None) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def role_chunk(completion_id: str, created: int, model: str) -> dict[str, Any]:
    return _chunk(completion_id, created, model, {"role": "assistant", "content": ""})


def content_chunk(completion_id: str, created: int, model: str, text: str, *,
                  field: str = "content") -> dict[str, Any]:
    return _chunk(completion_id, created, model, {field: text})


def tool_call_chunks(completion_id: str, created: int, model: str, reply: ParsedReply,
                     call_ids: list[str]) -> list[dict[str, Any]]:
    """Per call: one chunk with id and name, one with the arguments, each carrying its index."""
    chunks = []
    for index, call in enumerate(_tool_calls(reply, call_ids)):
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}
        body = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
        chunks.append(_chunk(completion_id, created, model, {"tool_calls": [head]}))
        chunks.append(_chunk(completion_id, created, model, {"tool_calls": [body]}))
    return chunks


def finish_chunk(completion_id: str, created: int, model: str, finish: str) -> dict[str, Any]:
    return _chunk(completion_id, created, model, {}, finish)


def usage_chunk(completion_id: str, created: int, model: str, usage: Usage) -> dict[str, Any]:
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": [], "usage": usage_json(usage)}


def stream_events(
    *, completion_id: str, created: int, model: str, reply: ParsedReply, call_ids: list[str],
    finish: str, usage: Usage | None,
) -> list[str]:
    """The whole SSE body for a reply that is already sampled (usage chunk if asked for)."""
    chunks = [role_chunk(completion_id, created, model)]
    if reply.reasoning is not None:
        chunks.append(content_chunk(completion_id, created, model, reply.reasoning,
                                    field="reasoning_content"))
    if reply.content:
        chunks.append(content_chunk(completion_id, created, model, reply.content))
    chunks += tool_call_chunks(completion_id, created, model, reply, call_ids)
    chunks.append(finish_chunk(completion_id, created, model, finish))
    if usage is not None:
        chunks.append(usage_chunk(completion_id, created, model, usage))
    return [sse(chunk) for chunk in chunks] + [DONE]


def error_json(message: str, *, type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "code": code, "param": None}}


def models_json(model_id: str, created: int) -> dict[str, Any]:
    return {"object": "list",
            "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "agentcore-rl"}]}
