"""A trace's conversation, read back from its token ids: the messages, reasoning, tool calls and
tool results the model saw and wrote, and which of them were trained. The one transcript model and
parser: report.html's transcripts, report.md's excerpts of failures and the viewer's rollout page
all read it.

Rollout records keep token ids, not messages, so the text is decoded with the run's tokenizer
(`tokenizer.Tokenizer`) and split at the chat template's turn markers (ChatML,
`<|im_start|>ROLE ... <|im_end|>`, with `<think>` reasoning and Hermes-style `<tool_call>` /
`<tool_response>` blocks, as the bundled template writes them). A template without those markers
is shown as its mask runs (context / trained).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..records import Rollout, Trace
from .tokenizer import Tokenizer

TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)  # cut at max_tokens: to the end
THINK = re.compile(r"<think>(.*?)</think>", re.S)
TOOL_RESPONSE = re.compile(r"^\s*<tool_response>\s*(.*?)\s*(?:</tool_response>\s*)?$", re.S)


@dataclass(frozen=True)
class ToolCall:
    """A tool call as written: `raw` the block's text, `name` / `arguments` (JSON) parsed from it
    (`(unparsed)` and the raw text when it is not a JSON call)."""

    name: str
    arguments: str
    raw: str


@dataclass(frozen=True)
class Message:
    """One turn of a transcript: `role` is system, user, assistant or tool (`context` for a mask
    run of a template without turn markers); `trained` is True when its tokens carry loss mask 1;
    `start` / `end` are its token positions in the trace."""

    role: str
    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    trained: bool
    start: int
    end: int


def transcript(token_ids: Sequence[int], prompt_length: int, loss_mask: Sequence[int],
               tokenizer: Tokenizer) -> list[Message]:
    """Every turn of one trace, in order (empty ones too: the viewer shows their token spans)."""
    token_ids = list(token_ids)
    mask = [0] * prompt_length + list(loss_mask)
    start_id, end_id = tokenizer.marker(TURN_START), tokenizer.marker(TURN_END)
    if start_id is None or end_id is None:
        return _by_mask(token_ids, mask, tokenizer)
    found, position = [], 0
    while position < len(token_ids):
        try:
            start = token_ids.index(start_id, position)
        except ValueError:
            break
        try:
            end = token_ids.index(end_id, start) + 1
        except ValueError:
            end = len(token_ids)  # a reply cut at max_tokens
        text = tokenizer.decode(token_ids[start + 1:end])
        role, _, body = text.partition("\n")
        found.append(_message(role.strip(), body.removesuffix(TURN_END), any(mask[start:end]),
                              start, end))
        position = end
    return found or _by_mask(token_ids, mask, tokenizer)


def _message(role: str, body: str, trained: bool, start: int, end: int) -> Message:
    reasoning = "\n".join(match.strip() for match in THINK.findall(body))
    body = THINK.sub("", body)
    calls = tuple(_tool_call(raw) for raw in TOOL_CALL.findall(body)) if role == "assistant" else ()
    if calls:
        body = TOOL_CALL.sub("", body)
    response = TOOL_RESPONSE.match(body) if role in ("user", "tool") else None
    if response:
        role, body = "tool", response.group(1)
    return Message(role, body.strip(), reasoning, calls, trained, start, end)


def _tool_call(raw: str) -> ToolCall:
    try:
        call = json.loads(raw)
        return ToolCall(str(call["name"]), json.dumps(call.get("arguments"), ensure_ascii=False), raw)
    except (ValueError, KeyError, TypeError):
        return ToolCall("(unparsed)", raw, raw)


def _by_mask(token_ids: Sequence[int], mask: Sequence[int], tokenizer: Tokenizer) -> list[Message]:
    found, start = [], 0
    for position in range(1, len(token_ids) + 1):
        if position == len(token_ids) or mask[position] != mask[start]:
            role = "assistant" if mask[start] else "context"
            found.append(Message(role, tokenizer.decode(token_ids[start:position]), "", (),
                                 bool(mask[start]), start, position))
            start = position
    return found


def messages(trace: Trace, tokenizer: Tokenizer) -> tuple[Message, ...]:
    """The conversation of one trace record as report.html shows it: turns with something in them."""
    return tuple(message for message in
                 transcript(trace.token_ids, trace.prompt_length, trace.loss_mask, tokenizer)
                 if message.content or message.reasoning or message.tool_calls)


def conversation(rollout: Rollout, tokenizer: Tokenizer) -> tuple[Message, ...]:
    """The rollout's longest trace (a linear episode is one trace) as messages."""
    if not rollout.traces:
        return ()
    return messages(max(rollout.traces, key=lambda trace: len(trace.token_ids)), tokenizer)


def excerpt(rollout: Rollout, tokenizer: Tokenizer, *, last: int = 4, chars: int = 160) -> list[str]:
    """The end of a failed rollout's conversation in a few short lines (report.md); the system
    prompt, the same for every rollout, is left to report.html."""
    lines = []
    for message in [m for m in conversation(rollout, tokenizer) if m.role != "system"][-last:]:
        text = " ".join(message.content.split())
        if message.tool_calls:
            calls = " ".join(f"→ {' '.join(call.raw.split())}" for call in message.tool_calls)
            text = (text + " " if text else "") + calls
        if len(text) > chars:
            text = text[:chars - 3] + "..."
        lines.append(f"{message.role}: {text}")
    return lines
