"""OpenAI Responses wire (`POST /v1/responses`): input items <-> internal form, JSON, SSE. Pure.

Input: a string (one user message) or items: messages (`input_text`/`output_text` parts),
`reasoning`, `function_call` and `function_call_output`; `instructions` become a leading system
message. Consecutive `reasoning` / assistant `message` / `function_call` items fold into one
internal assistant message (in that order), so a history the gateway returned folds back exactly.

Streaming: response.created, response.in_progress, then per output item output_item.added,
(reasoning_text.delta... / content_part.added, output_text.delta... / function_call_arguments
.delta), the matching .done events, output_item.done; then response.completed (or
response.incomplete when the reply hit the token limit), each with a `sequence_number`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .known_history import text_leaves_only
from .messages import Message, WireError, assistant, function_tool, new_id, text_of, tool_call
from .replies import reply_tool_calls
from .schemas import RESPONSES_SHAPE, check_shape
from .streaming import Delta, sse
from .turn import TurnResult


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | list[dict[str, Any]] = []
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_the_published_shape(cls, data: Any) -> Any:
        return check_shape(RESPONSES_SHAPE, data)


def tools_to_internal(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools -> internal tools."""
    if not tools:
        return None
    internal = []
    for tool in tools:
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise WireError(f"tools: only function tools are supported, got {tool!r:.200}")
        internal.append(function_tool(tool.get("name"), tool.get("description"),
                                      tool.get("parameters"), where="tools"))
    return internal


def tools_from_internal(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", **tool["function"]} for tool in tools]


def _reasoning_text(item: Mapping[str, Any]) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(part["text"] for part in parts if isinstance(part, Mapping) and isinstance(part.get("text"), str))


def to_internal(input: str | Sequence[Mapping[str, Any]], instructions: str | None = None) -> list[Message]:
    """Responses input -> internal messages (see `messages.py`)."""
    return [*instructions_to_internal(instructions), *items_to_internal(input)[0]]


def instructions_to_internal(instructions: str | None) -> list[Message]:
    return [{"role": "system", "content": instructions}] if instructions else []


def plain_item(item: Any) -> bool:
    """An input item whose equality (==) as parsed JSON decides its translation: text leaves
    only, and a function call's arguments as a string (the standard; an object's key order
    would be the arguments' text)."""
    return text_leaves_only(item) and not (isinstance(item, Mapping) and isinstance(item.get("arguments"), dict))


def items_to_internal(input: str | Sequence[Mapping[str, Any]],
                      start: int = 0) -> tuple[list[Message], list[int | None]]:
    """Responses input items -> internal messages, and after each item how many there are, or
    None after an item the next one may still fold into (a known history may not end there);
    `start`: the index of the first in the request (errors name it)."""
    if isinstance(input, str):
        return [{"role": "user", "content": input}], []
    internal: list[Message] = []
    ends: list[int | None] = []
    open_reply: Message | None = None
    for index, item in enumerate(input, start):
        where = f"input[{index}]"
        kind = item.get("type", "message") if isinstance(item, Mapping) else None
        if kind == "reasoning":
            open_reply = assistant("", reasoning=_reasoning_text(item) or None)
            internal.append(open_reply)
        elif kind == "message" and item.get("role") == "assistant":
            content = text_of(item.get("content"), where=where, kinds=("output_text", "text", "refusal"))
            if open_reply is None or open_reply["content"] or open_reply.get("tool_calls"):
                open_reply = assistant("")
                internal.append(open_reply)
            open_reply["content"] = content
        elif kind == "function_call":
            if open_reply is None:
                open_reply = assistant("")
                internal.append(open_reply)
            open_reply.setdefault("tool_calls", []).append(
                tool_call(str(item.get("call_id") or ""), str(item.get("name") or ""), item.get("arguments", "{}")))
        elif kind == "function_call_output":
            open_reply = None
            internal.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                             "content": text_of(item.get("output"), where=where)})
        elif kind == "message" and item.get("role") in ("user", "system", "developer"):
            open_reply = None
            role = "system" if item["role"] == "developer" else item["role"]
            internal.append({"role": role, "content": text_of(item.get("content"), where=where)})
        else:
            raise WireError(f"{where}: unsupported input item {kind!r} (role {item.get('role')!r})"
                            if isinstance(item, Mapping) else f"{where}: an input item must be an object")
        ends.append(None if open_reply is not None else len(internal))
    return internal, ends


def from_internal(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Internal messages -> (instructions, input items) as a client would send them."""
    instructions = None
    if messages and messages[0]["role"] == "system":
        instructions, messages = messages[0]["content"], messages[1:]
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
        elif role == "assistant":
            items += output_items(message, ids=False)
        else:
            items.append({"type": "message", "role": role,
                          "content": [{"type": "input_text", "text": message["content"]}]})
    return instructions, items


def output_items(message: Message, *, ids: bool = True, status: str = "completed") -> list[dict[str, Any]]:
    """An internal assistant message -> Responses output items."""
    def with_id(item: dict[str, Any], prefix: str) -> dict[str, Any]:
        return {"id": new_id(prefix), **item, "status": status} if ids else item

    items = []
    if message.get("reasoning"):
        items.append(with_id({"type": "reasoning", "summary": [],
                              "content": [{"type": "reasoning_text", "text": message["reasoning"]}]}, "rs_"))
    if message["content"] or not (items or message.get("tool_calls")):
        items.append(with_id({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": message["content"], "annotations": []}]}, "msg_"))
    for call in message.get("tool_calls") or ():
        items.append(with_id({"type": "function_call", "call_id": call["id"],
                              "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]}, "fc_"))
    return items


def response_json(*, response_id: str, created: int, model: str, output: list[dict[str, Any]],
                  status: str, result: TurnResult | None, request: ResponsesRequest) -> dict[str, Any]:
    usage = None
    if result is not None:
        prompt, completion = result.usage.prompt_tokens, result.usage.completion_tokens
        usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": prompt + completion}
    return {
        "id": response_id, "object": "response", "created_at": created, "model": model,
        "status": status, "output": output, "usage": usage, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions, "tools": request.tools or [], "tool_choice": "auto",
        "parallel_tool_calls": True, "temperature": request.temperature, "top_p": request.top_p,
        "max_output_tokens": request.max_output_tokens, "metadata": {},
        "previous_response_id": request.previous_response_id, "text": {"format": {"type": "text"}},
    }


def status_of(result: TurnResult) -> str:
    return "incomplete" if result.sampled_finish == "length" else "completed"


class ResponsesStream:
    """The Responses SSE grammar for one streamed turn (a `streaming.WireStream`)."""

    def __init__(self, *, response_id: str, created: int, model: str, request: ResponsesRequest,
                 on_done: Any) -> None:
        self._response = dict(response_id=response_id, created=created, model=model, request=request)
        self._on_done = on_done  # (result, internal reply message) -> None
        self._sequence = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\n" + sse(data)

    def _snapshot(self, status: str, result: TurnResult | None = None) -> dict[str, Any]:
        return response_json(output=list(self._output), status=status, result=result, **self._response)

    def start(self) -> list[str]:
        return [self._event("response.created", response=self._snapshot("in_progress")),
                self._event("response.in_progress", response=self._snapshot("in_progress"))]

    def _add(self, item: dict[str, Any]) -> list[str]:
        self._open = item
        events = [self._event("response.output_item.added", output_index=len(self._output), item=item)]
        if item["type"] == "message":
            events.append(self._event("response.content_part.added", item_id=item["id"],
                                      output_index=len(self._output), content_index=0,
                                      part={"type": "output_text", "text": "", "annotations": []}))
        return events

    def _close(self) -> list[str]:
        item, self._open = self._open, None
        if item is None:
            return []
        index, events = len(self._output), []
        if item["type"] == "reasoning":
            text = item.pop("_text")
            item["content"] = [{"type": "reasoning_text", "text": text}]
            events.append(self._event("response.reasoning_text.done", item_id=item["id"],
                                      output_index=index, content_index=0, text=text))
        elif item["type"] == "message":
            text = item.pop("_text")
            part = {"type": "output_text", "text": text, "annotations": []}
            item["content"] = [part]
            events += [self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                   content_index=0, text=text, logprobs=[]),
                       self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                   content_index=0, part=part)]
        item["status"] = "completed"
        self._output.append(item)
        return [*events, self._event("response.output_item.done", output_index=index, item=item)]

    def delta(self, delta: Delta) -> list[str]:
        kind = "reasoning" if delta.kind == "reasoning" else "message"
        events: list[str] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close()
            item = ({"id": new_id("rs_"), "type": "reasoning", "summary": [], "status": "in_progress"}
                    if kind == "reasoning" else
                    {"id": new_id("msg_"), "type": "message", "role": "assistant", "status": "in_progress",
                     "content": []})
            events += self._add(item)
            self._open["_text"] = ""
        self._open["_text"] += delta.text
        event = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        events.append(self._event(event, item_id=self._open["id"], output_index=len(self._output),
                                  content_index=0, delta=delta.text, **extra))
        return events

    def finish(self, result: TurnResult) -> list[str]:
        calls = reply_tool_calls(result.reply)
        events = self._close()
        if not self._output and not calls:
            events += self.delta(Delta("content", "")) + self._close()
        for call in calls:
            item = {"id": new_id("fc_"), "type": "function_call", "call_id": call["id"],
                    "name": call["function"]["name"], "arguments": "", "status": "in_progress"}
            events += self._add(item)
            index, arguments = len(self._output), call["function"]["arguments"]
            events += [self._event("response.function_call_arguments.delta", item_id=item["id"],
                                   output_index=index, delta=arguments),
                       self._event("response.function_call_arguments.done", item_id=item["id"],
                                   output_index=index, name=item["name"], arguments=arguments)]
            item["arguments"] = arguments
            events += self._close()
        self._on_done(result, calls)
        status = status_of(result)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=self._snapshot(status, result))]

    def error(self, status: int, message: str) -> list[str]:
        return [self._event("error", code="server_error" if status >= 500 else "invalid_request",
                            message=message, param=None)]
