"""The `Renderer` seam: chat messages -> prompt text/token ids; sampled ids -> text, reasoning, tools.

`ChatTemplateRenderer` uses the tokenizer's own chat template. Messages are normalised first
(`normalize_messages`) so that what the gateway compares and what the template sees are the same
thing: string content, tool-call arguments as dicts, no ids. Tool calls are supported when the
template speaks the Hermes format (`<tool_call>{json}</tool_call>`); a request with tools against a
template without a known tool format is a `RenderError`, never silently dropped tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol, runtime_checkable

from ..errors import RenderError

Message = dict[str, Any]

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_THINK = re.compile(r"\s*<think>(.*?)(?:</think>|$)", re.DOTALL)


def load_template(name: str = "chatml_tools") -> str:
    """The text of a chat template shipped in `agentcore_rl_harness/templates/<name>.jinja`."""
    return resources.files("agentcore_rl_harness").joinpath(f"templates/{name}.jinja").read_text()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedReply:
    """What the model said: visible text, `<think>` reasoning, and tool calls.

    `ill_formed` is True when the output tried to call a tool but could not be parsed; the raw
    text is then kept in `content` so nothing the model produced is lost.
    """

    content: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    ill_formed: bool = False

    def to_message(self) -> Message:
        """The normalised assistant message the template would render for this reply."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


@runtime_checkable
class Renderer(Protocol):
    """Messages -> prompt text and ids; sampled ids -> text and a parsed reply."""

    stop_token_ids: tuple[int, ...]
    end_of_turn: str

    def render(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def parse_reply(self, text: str) -> ParsedReply: ...


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in ("text", "input_text", None):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise RenderError(f"unsupported message content part {kind!r}: only text is rendered")
        return "".join(parts)
    raise RenderError(f"message content must be a string or a list of text parts, got {content!r}")


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return value  # rendered verbatim; compared as the same string
    return dict(value) if isinstance(value, Mapping) else value


def normalize_message(message: Mapping[str, Any]) -> Message:
    """One OpenAI-shaped message -> `{role, content, tool_calls?}` with string content."""
    if not isinstance(message, Mapping) or "role" not in message:
        raise RenderError(f"each message needs a 'role', got {message!r}")
    normalised: Message = {"role": str(message["role"]), "content": _text_of(message.get("content"))}
    if normalised["role"] == "developer":
        normalised["role"] = "system"
    calls = message.get("tool_calls") or []
    if calls:
        normalised["tool_calls"] = [
            {"type": "function", "function": {
                "name": str(function.get("name", "")),
                "arguments": _arguments(function.get("arguments", {})),
            }}
            for function in (call.get("function", call) for call in calls)
        ]
    return normalised


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    return [normalize_message(m) for m in messages]


def message_key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """Equality key of a normalised message: role, content and tool calls (name, parsed args)."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
        for c in message.get("tool_calls") or ()
    )
    return (message["role"], message.get("content") or "", calls)


class ChatTemplateRenderer:
    """A `Renderer` over a Hugging Face tokenizer and its chat template."""

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        self._tokenizer = tokenizer
        self._template = chat_template or tokenizer.chat_template
        if not self._template:
            raise RenderError("the tokenizer has no chat template; pass chat_template=...")
        self.supports_tools = "<tool_call>" in self._template and "tools" in self._template
        stop = [self._token_id("<|im_end|>") if "<|im_end|>" in self._template else None]
        stop.append(tokenizer.eos_token_id)
        self.stop_token_ids: tuple[int, ...] = tuple(dict.fromkeys(i for i in stop if i is not None))
        if not self.stop_token_ids:
            raise RenderError("the tokenizer has neither <|im_end|> nor an eos token to stop on")
        self.end_of_turn: str = tokenizer.convert_ids_to_tokens(self.stop_token_ids[0])

    def _token_id(self, token: str) -> int | None:
        token_id = self._tokenizer.convert_tokens_to_ids(token)
        return None if token_id is None or token_id == self._tokenizer.unk_token_id else token_id

    def render(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        if tools and not self.supports_tools:
            raise RenderError(
                "the request has tools but the chat template has no known tool format (Hermes "
                "<tool_call>); use a tool-aware template, e.g. templates/chatml_tools.jinja"
            )
        try:
            return self._tokenizer.apply_chat_template(
                normalize_messages(messages), tools=list(tools) if tools else None,
                chat_template=self._template, add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
        except Exception as exc:  # jinja raises many types; all mean "cannot render these"
            raise RenderError(f"chat template failed to render the messages: {exc}") from exc

    def render_ids(self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Prompt token ids for a fresh conversation (with the generation prompt)."""
        return self.encode(self.render(messages, tools=tools))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def parse_reply(self, text: str) -> ParsedReply:
        reasoning = None
        think = _THINK.match(text)
        if think and "<think>" in text:
            reasoning = think.group(1).strip()
            text = text[think.end():].lstrip()
        if not self.supports_tools or "<tool_call>" not in text:
            return ParsedReply(content=text, reasoning=reasoning)
        calls = []
        for body in _TOOL_CALL.findall(text):
            call = _parse_call(body)
            if call is None:
                return ParsedReply(content=text, reasoning=reasoning, ill_formed=True)
            calls.append(call)
        rest = _TOOL_CALL.sub("", text)
        if not calls or "<tool_call>" in rest:
            return ParsedReply(content=text, reasoning=reasoning, ill_formed=True)
        return ParsedReply(content=rest.strip(), reasoning=reasoning, tool_calls=tuple(calls))


def _parse_call(body: str) -> ToolCall | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name=data["name"], arguments=arguments)
