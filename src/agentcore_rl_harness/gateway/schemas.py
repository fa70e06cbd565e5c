"""The published request shapes of the three wires, checked before any code reads a body.

Each wire's request model (`openai_wire.ChatCompletionRequest`, `responses_wire.ResponsesRequest`,
`anthropic_wire.MessagesRequest`) runs its shape here first, so a message whose `tool_calls` is
`"x"`, a `tool_use` whose `input` is a string or a text block without `text` is a 400 naming the
field, never an exception deep in translation. Unknown keys are allowed (SDKs send extras such as
`name`, `annotations`, `cache_control`); the types of the keys the gateway reads are not
negotiable. Content parts and blocks of kinds the gateway does not train on (images, documents)
pass here and are refused by the translation with a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = ["ANTHROPIC_SHAPE", "CHAT_SHAPE", "RESPONSES_SHAPE", "check_shape"]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Other(_Shape):
    """A part or block of a kind the translation decides about (and refuses with a message)."""

    type: str


def _tagged(known: Collection[str], default: str | None = None) -> Callable[[Any], str | None]:
    def tag(value: Any) -> str | None:
        if isinstance(value, BaseModel):
            value = value.__dict__
        if not isinstance(value, dict):
            return None
        kind = value.get("type", default)
        return kind if kind in known else "other" if isinstance(kind, str) else None
    return tag


def _parts(kinds: tuple[str, ...]) -> Any:
    """A list of content parts where each `kinds` part must carry a string `text`."""
    class TextPart(_Shape):
        type: str
        text: str

    union = Union[tuple(Annotated[TextPart, Tag(kind)] for kind in kinds) + (Annotated[_Other, Tag("other")],)]
    return list[Annotated[union, Discriminator(_tagged(kinds))]]


ChatParts = _parts(("text",))
ChatContent = Union[str, ChatParts]


class ChatFunctionCall(_Shape):
    name: str
    arguments: str | dict[str, Any]


class ChatToolCall(_Shape):
    id: str
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatSystem(_Shape):
    role: Literal["system", "developer"]
    content: ChatContent


class ChatUser(_Shape):
    role: Literal["user"]
    content: ChatContent


class ChatAssistant(_Shape):
    role: Literal["assistant"]
    content: ChatContent | None = None
    tool_calls: list[ChatToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChatTool(_Shape):
    role: Literal["tool"]
    tool_call_id: str
    content: ChatContent


class ChatFunctionSpec(_Shape):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatToolSpec(_Shape):
    type: Literal["function"] = "function"
    function: ChatFunctionSpec


class ChatShape(_Shape):
    messages: Annotated[list[Annotated[Union[ChatSystem, ChatUser, ChatAssistant, ChatTool],
                                       Field(discriminator="role")]], Field(min_length=1)]
    tools: list[ChatToolSpec] | None = None


AnthropicParts = _parts(("text",))


class AnthropicText(_Shape):
    type: Literal["text"]
    text: str


class AnthropicThinking(_Shape):
    type: Literal["thinking"]
    thinking: str


class AnthropicToolUse(_Shape):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class AnthropicToolResult(_Shape):
    type: Literal["tool_result"]
    tool_use_id: str
    content: Union[str, AnthropicParts, None] = None


_BLOCK_KINDS = ("text", "thinking", "redacted_thinking", "tool_use", "tool_result")
AnthropicBlock = Annotated[Union[
    Annotated[AnthropicText, Tag("text")], Annotated[AnthropicThinking, Tag("thinking")],
    Annotated[_Other, Tag("redacted_thinking")], Annotated[AnthropicToolUse, Tag("tool_use")],
    Annotated[AnthropicToolResult, Tag("tool_result")], Annotated[_Other, Tag("other")],
], Discriminator(_tagged(_BLOCK_KINDS))]


class AnthropicMessage(_Shape):
    role: Literal["user", "assistant", "system"]  # system: a system turn in place (`anthropic_wire.py`)
    content: Union[str, list[AnthropicBlock]]


class AnthropicToolSpec(_Shape):
    type: str | None = None
    name: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class AnthropicShape(_Shape):
    messages: Annotated[list[AnthropicMessage], Field(min_length=1)]
    system: Union[str, AnthropicParts, None] = None
    tools: list[AnthropicToolSpec] | None = None


ResponsesParts = _parts(("input_text", "output_text", "text"))


class ResponsesMessage(_Shape):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Union[str, ResponsesParts]


# A reasoning item's parts: `summary_text` (summary) and `reasoning_text` (content) in the published
# API; every part that carries a `text` must carry a string.
ReasoningParts = _parts(("summary_text", "reasoning_text", "input_text", "output_text", "text"))


class ResponsesReasoning(_Shape):
    type: Literal["reasoning"]
    summary: ReasoningParts | None = None
    content: ReasoningParts | None = None


class ResponsesFunctionCall(_Shape):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class ResponsesFunctionCallOutput(_Shape):
    type: Literal["function_call_output"]
    call_id: str
    output: Union[str, ResponsesParts]


_ITEM_KINDS = ("message", "reasoning", "function_call", "function_call_output")
ResponsesItem = Annotated[Union[
    Annotated[ResponsesMessage, Tag("message")], Annotated[ResponsesReasoning, Tag("reasoning")],
    Annotated[ResponsesFunctionCall, Tag("function_call")],
    Annotated[ResponsesFunctionCallOutput, Tag("function_call_output")], Annotated[_Other, Tag("other")],
], Discriminator(_tagged(_ITEM_KINDS, default="message"))]


class ResponsesToolSpec(_Shape):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ResponsesShape(_Shape):
    input: Union[str, list[ResponsesItem]] = []
    instructions: str | None = None
    tools: list[ResponsesToolSpec] | None = None


CHAT_SHAPE: type[BaseModel] = ChatShape
ANTHROPIC_SHAPE: type[BaseModel] = AnthropicShape
RESPONSES_SHAPE: type[BaseModel] = ResponsesShape


def check_shape(shape: type[BaseModel], data: Any) -> Any:
    """`data` unchanged once it has `shape` (raises pydantic's `ValidationError` otherwise); for a
    request model's `model_validator(mode="before")`."""
    shape.model_validate(data)
    return data
