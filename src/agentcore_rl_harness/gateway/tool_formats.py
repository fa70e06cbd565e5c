"""Tool-call formats of the open-model families, detected from the chat template's own text.

A format turns what the model wrote into visible text plus `ToolCall`s. Detection reads the
markers a template emits (not a hash of the template, which breaks on every revision):

    template contains                              format
    <tool_call> and <function=                     qwen_xml    (Qwen3.5, Qwen3-Coder)
    <tool_call>                                    hermes      (Hermes, Qwen2.5, Qwen3, SmolLM2 chatml_tools)
    <|python_tag|>, or ipython + "parameters"      llama_json  (Llama 3.1 / 3.2 / 3.3)
    none of these                                  no tool support

A reply that tries to call a tool but cannot be parsed is `ill_formed`: its raw text is kept as
content and nothing raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedTools:
    """The visible text left after removing tool calls, the calls, and whether parsing failed."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    ill_formed: bool = False


class ToolFormat(Protocol):
    name: str

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedTools: ...


def _failed(text: str) -> ParsedTools:
    return ParsedTools(content=text, ill_formed=True)


def _call_from_json(data: Any) -> ToolCall | None:
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name=data["name"], arguments=arguments)


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _parse_blocks(text: str, parse_body: Any) -> ParsedTools:
    if "<tool_call>" not in text:
        return ParsedTools(content=text)
    calls = []
    for body in _BLOCK.findall(text):
        parsed = parse_body(body)
        if not parsed:
            return _failed(text)
        calls.extend(parsed)
    rest = _BLOCK.sub("", text)
    if not calls or "<tool_call>" in rest or "</tool_call>" in rest:
        return _failed(text)
    return ParsedTools(content=rest.strip(), tool_calls=tuple(calls))


class HermesJson:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call."""

    name = "hermes"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedTools:
        def body(raw: str) -> list[ToolCall]:
            try:
                call = _call_from_json(json.loads(raw))
            except json.JSONDecodeError:
                return []
            return [call] if call else []
        return _parse_blocks(text, body)


_FUNCTION = re.compile(r"^\s*<function=([^>\n]+)>(.*?)</function>\s*$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _schema_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[tuple[str, str], str]:
    types: dict[tuple[str, str], str] = {}
    for tool in tools or ():
        function = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        properties = ((function.get("parameters") or {}).get("properties") or {})
        for parameter, schema in properties.items():
            if isinstance(schema, Mapping) and isinstance(schema.get("type"), str):
                types[(str(function.get("name")), parameter)] = schema["type"]
    return types


def _xml_value(raw: str, declared: str | None) -> Any:
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    if declared == "string":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


class QwenXml:
    """`<tool_call><function=name><parameter=x>value</parameter></function></tool_call>`.

    Values are JSON when they parse as JSON, else strings; a parameter the tool's schema declares
    as `string` stays a string ("42" is not turned into 42).
    """

    name = "qwen_xml"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedTools:
        types = _schema_types(tools)

        def body(raw: str) -> list[ToolCall]:
            match = _FUNCTION.match(raw)
            if match is None:
                return []
            name, inner = match.group(1).strip(), match.group(2)
            if _PARAMETER.sub("", inner).strip():
                return []  # stray text or an unclosed <parameter=...>
            arguments = {key.strip(): _xml_value(value, types.get((name, key.strip())))
                         for key, value in _PARAMETER.findall(inner)}
            return [ToolCall(name=name, arguments=arguments)]
        return _parse_blocks(text, body)


class LlamaJson:
    """Llama 3.1 JSON calls: `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`.

    Several calls may be separated by `;`. A reply that starts like a call but is not valid JSON
    is ill-formed; plain prose is content.
    """

    name = "llama_json"
    _TAG = "<|python_tag|>"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedTools:
        tagged = self._TAG in text
        prefix, _, body = text.partition(self._TAG) if tagged else ("", "", text)
        stripped = body.strip()
        if not tagged and not re.match(r'\{\s*"name"', stripped):
            return ParsedTools(content=text)
        calls = self._calls(stripped)
        if calls is None:
            return _failed(text)
        return ParsedTools(content=prefix.strip(), tool_calls=tuple(calls))

    @staticmethod
    def _calls(body: str) -> list[ToolCall] | None:
        decoder = json.JSONDecoder()
        calls, position = [], 0
        while position < len(body):
            try:
                data, end = decoder.raw_decode(body, position)
            except json.JSONDecodeError:
                return None
            call = _call_from_json(data)
            if call is None:
                return None
            calls.append(call)
            position = end
            while position < len(body) and body[position] in " \n\t;":
                position += 1
        return calls or None


def detect_tool_format(template: str) -> ToolFormat | None:
    """The tool format a chat template speaks, read from the markers it emits; None if unknown."""
    if "<tool_call>" in template:
        return QwenXml() if "<function=" in template else HermesJson()
    if "<|python_tag|>" in template or ("ipython" in template and '"parameters"' in template):
        return LlamaJson()
    return None
