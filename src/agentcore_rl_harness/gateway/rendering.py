"""The `Renderer` seam: chat messages -> prompt text/token ids; sampled ids -> text, reasoning, tools.

`ChatTemplateRenderer` uses the tokenizer's own chat template. Messages are normalised first
(`normalize_messages`) so that what the gateway compares and what the template sees are the same
thing: string content, tool-call arguments as dicts, no ids, and `reasoning_content` kept for
templates that render it (Qwen3). The tool-call format is read from the template's content
(`tool_formats`): Hermes/Qwen JSON `<tool_call>`, Qwen XML `<function=...>`, Llama 3.1 JSON. A
request with tools against a template without a known tool format is a `RenderError`, never
silently dropped tools; a reply that cannot be parsed is text with `ill_formed` set.

Rendering relies on transformers' `apply_chat_template(..., tokenize=False)` returning the text
and on its Jinja environment (trim_blocks, `tojson`); `SUPPORTED_TRANSFORMERS` is the range this
is tested on, checked when a renderer is built.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from typing import Any, Protocol, runtime_checkable

from ..errors import RenderError
from .messages import WireError, text_of
from .tool_formats import ToolCall, ToolFormat, detect_tool_format

Message = dict[str, Any]

SUPPORTED_TRANSFORMERS = ">=5.0,<6"

_THINK = re.compile(r"\s*<think>(.*?)(?:</think>|$)", re.DOTALL)

__all__ = [
    "SUPPORTED_TRANSFORMERS", "ChatTemplateRenderer", "Message", "ParsedReply", "Renderer", "ToolCall",
    "check_transformers_version", "load_template", "message_key", "normalize_message",
    "normalize_messages",
]


def check_transformers_version(version: str | None = None) -> None:
    """Raise `RenderError` unless transformers (or `version`) is in `SUPPORTED_TRANSFORMERS`."""
    from packaging.specifiers import SpecifierSet

    if version is None:
        try:
            version = metadata.version("transformers")
        except metadata.PackageNotFoundError:
            return  # a duck-typed tokenizer without transformers: nothing to check
    if version not in SpecifierSet(SUPPORTED_TRANSFORMERS, prereleases=True):
        raise RenderError(
            f"transformers {version} is outside the supported range {SUPPORTED_TRANSFORMERS!r} "
            "(chat-template rendering is tested only there); pip install "
            f"'transformers{SUPPORTED_TRANSFORMERS}'"
        )


def load_template(name: str = "chatml_tools") -> str:
    """The text of a chat template shipped in `agentcore_rl_harness/templates/<name>.jinja`."""
    return resources.files("agentcore_rl_harness").joinpath(f"templates/{name}.jinja").read_text()


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
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


@runtime_checkable
class Renderer(Protocol):
    """Messages -> prompt text and ids; sampled ids -> text and a parsed reply. Implementations
    subclass it: `render_normalized` has a default here, so callers never probe for it."""

    stop_token_ids: tuple[int, ...]
    end_of_turn: str

    def render(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str: ...

    def render_normalized(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """`render` for messages that are `normalize_messages` output already (the trajectory tree
        keeps them so); a renderer may skip its normalisation then. Default: `render`."""
        return self.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def parse_reply(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedReply: ...


def _text_of(content: Any) -> str:
    """`messages.text_of` for the renderer's callers, failing as a `RenderError`."""
    try:
        return text_of(content, where="message content", kinds=("text", "input_text", "output_text", None))
    except WireError as exc:
        raise RenderError(str(exc)) from exc


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
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    if isinstance(reasoning, str) and normalised["role"] == "assistant":
        normalised["reasoning_content"] = reasoning
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
    """Equality key of a normalised message: role, content and tool calls (name, parsed args).

    Reasoning is not part of the key: many clients drop it when they send the history back."""
    calls = tuple(
        (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
        for c in message.get("tool_calls") or ()
    )
    return (message["role"], message.get("content") or "", calls)


# Encodes a renderer remembers: texts up to ENCODE_CACHE_MAX_CHARS, ENCODE_CACHE_BUDGET_CHARS in all.
# The glue + next message of a turn, and a group's shared first prompt, repeat across sessions.
ENCODE_CACHE_MAX_CHARS = 16 * 1024
ENCODE_CACHE_BUDGET_CHARS = 4 * 1024 * 1024

_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
_EXTRA_STOPS = ("<|eom_id|>",)  # Llama: end of message, expecting a tool result


class ChatTemplateRenderer(Renderer):
    """A `Renderer` over a Hugging Face tokenizer and its chat template.

    The template's content decides the end-of-turn token (the first of <|im_end|>, <|eot_id|>,
    <|end|>, <end_of_turn> it writes that the tokenizer knows, else EOS), the tool-call format
    (`tool_formats.detect_tool_format`) and whether reasoning is read from `<think>` blocks.
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        check_transformers_version()
        self._tokenizer = tokenizer
        self._template = chat_template or tokenizer.chat_template
        if not self._template:
            raise RenderError("the tokenizer has no chat template; pass chat_template=...")
        self.tool_format: ToolFormat | None = detect_tool_format(self._template)
        self.supports_tools = self.tool_format is not None
        ends = [self._token_id(t) for t in _END_OF_TURN if t in self._template]
        extra = [self._token_id(t) for t in _EXTRA_STOPS if t in self._template]
        stop = [*ends, *extra, tokenizer.eos_token_id]
        self.stop_token_ids: tuple[int, ...] = tuple(dict.fromkeys(i for i in stop if i is not None))
        if not self.stop_token_ids:
            raise RenderError(
                "the chat template writes no known end-of-turn token (<|im_end|>, <|eot_id|>, "
                "<|end|>, <end_of_turn>) that the tokenizer knows, and the tokenizer has no eos "
                "token; add the template's end-of-turn token to the tokenizer"
            )
        self.end_of_turn: str = tokenizer.convert_ids_to_tokens(self.stop_token_ids[0])
        self._jinja = _direct_renderer(tokenizer, self._template)
        self._encoded: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._encoded_chars = 0
        self._encoded_lock = threading.Lock()

    def _token_id(self, token: str) -> int | None:
        token_id = self._tokenizer.convert_tokens_to_ids(token)
        return None if token_id is None or token_id == self._tokenizer.unk_token_id else token_id

    def render(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        return self.render_normalized(normalize_messages(messages), tools=tools,
                                      add_generation_prompt=add_generation_prompt)

    def render_normalized(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """`render` for messages that are already `normalize_messages` output (plain JSON data:
        the trajectory tree keeps them so), skipping the second normalisation."""
        if tools and not self.supports_tools:
            raise RenderError(
                "the request has tools but the chat template has no known tool format (Hermes or "
                "Qwen <tool_call>, Llama 3.1 JSON); use a tool-aware template, e.g. "
                "templates/chatml_tools.jinja"
            )
        try:
            if self._jinja is not None and messages:
                return self._jinja(messages, list(tools) if tools else None, add_generation_prompt)
            return self._tokenizer.apply_chat_template(
                list(messages), tools=list(tools) if tools else None,
                chat_template=self._template, add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
        except Exception as exc:  # jinja raises many types; all mean "cannot render these"
            raise RenderError(f"chat template failed to render the messages: {exc}") from exc

    def render_ids(self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Prompt token ids for a fresh conversation (with the generation prompt)."""
        return self.encode(self.render(messages, tools=tools))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added); short texts are remembered (LRU)."""
        if len(text) > ENCODE_CACHE_MAX_CHARS:
            return list(self._tokenizer.encode(text, add_special_tokens=False))
        with self._encoded_lock:
            ids = self._encoded.get(text)
            if ids is not None:
                self._encoded.move_to_end(text)
                return list(ids)
        ids = tuple(self._tokenizer.encode(text, add_special_tokens=False))
        with self._encoded_lock:
            if text not in self._encoded:
                self._encoded[text] = ids
                self._encoded_chars += len(text)
                while self._encoded_chars > ENCODE_CACHE_BUDGET_CHARS:
                    evicted, _ = self._encoded.popitem(last=False)
                    self._encoded_chars -= len(evicted)
        return list(ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def parse_reply(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> ParsedReply:
        """Split a sampled reply into reasoning, visible text and tool calls; never raises.

        `tools`, when given, lets formats that carry untyped values (Qwen XML) keep declared
        strings as strings.
        """
        reasoning, text = _split_reasoning(text)
        if self.tool_format is None:
            return ParsedReply(content=text, reasoning=reasoning)
        parsed = self.tool_format.parse(text, tools=tools)
        return ParsedReply(content=parsed.content, reasoning=reasoning, tool_calls=parsed.tool_calls,
                           ill_formed=parsed.ill_formed)


def _direct_renderer(tokenizer: Any, template: Any) -> Callable[..., str] | None:
    """What `apply_chat_template(tokenize=False)` does for plain-dict messages, without its
    per-call conversions: `(messages, tools, add_generation_prompt) -> text`, or None when the
    tokenizer's `apply_chat_template` is not the stock one or the template is not one string.

    Normalised messages and JSON tools are already the plain data transformers'
    `_plain_template_data` rebuilds, so the compiled template (transformers' own cache, its
    immutable sandbox) renders them directly; reasoning is aliased the way transformers does
    (`_alias_reasoning_fields`). Where those helpers are missing, `render_jinja_template`."""
    if not isinstance(template, str):
        return None
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.utils import chat_template_utils
    except ImportError:
        return None
    special = getattr(tokenizer, "special_tokens_map", None)
    stock = getattr(type(tokenizer), "apply_chat_template", None) is PreTrainedTokenizerBase.apply_chat_template
    if not stock or not isinstance(special, dict):
        return None
    special = {k: v for k, v in special.items() if isinstance(k, str) and type(v) is str}
    compile_template = getattr(chat_template_utils, "_compile_jinja_template", None)
    alias = getattr(chat_template_utils, "_alias_reasoning_fields", None)
    if compile_template is not None and alias is not None:
        compiled = compile_template(template)

        def render(messages: Sequence[Message], tools: list[Any] | None, add_generation_prompt: bool) -> str:
            chat = alias([{k: v for k, v in m.items() if v is not None} for m in messages])
            return compiled.render(messages=chat, tools=tools, documents=None,
                                   add_generation_prompt=add_generation_prompt, **special)
        return render
    render_jinja_template = chat_template_utils.render_jinja_template

    def render_stock(messages: Sequence[Message], tools: list[Any] | None, add_generation_prompt: bool) -> str:
        rendered, _ = render_jinja_template(
            conversations=[[{k: v for k, v in m.items() if v is not None} for m in messages]], tools=tools,
            documents=None, chat_template=template, return_assistant_tokens_mask=False,
            continue_final_message=False, add_generation_prompt=add_generation_prompt, **tokenizer.special_tokens_map)
        return rendered[0]
    return render_stock


def _split_reasoning(text: str) -> tuple[str | None, str]:
    """`<think>r</think> rest` -> (r, rest). A reply that only closes (the template opened the
    block in the generation prompt, as Qwen3.5 and DeepSeek-R1 do) is read the same way."""
    think = _THINK.match(text)
    if think and "<think>" in text:
        return think.group(1).strip(), text[think.end():].lstrip()
    if "</think>" in text and "<think>" not in text:
        reasoning, _, rest = text.partition("</think>")
        return reasoning.strip(), rest.lstrip()
    return None, text
