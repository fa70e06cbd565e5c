"""A rollout's conversation, read back from its traces: the messages, tool calls and tool results
the model saw and wrote, for report.html's transcripts and report.md's excerpts of failures.

Rollout records keep token ids, not messages, so the text is decoded with the run's tokenizer
and split on the chat template's turn markers (ChatML, `<|im_start|>role ... <|im_end|>`, with
Hermes-style `<tool_call>` / `<tool_response>` blocks, as the bundled template writes them). A
template without those markers gives one message holding the decoded text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..records import Rollout, Trace

Decode = Callable[[Sequence[int]], str]
TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
TOOL_RESPONSE = re.compile(r"^<tool_response>\n?(.*?)\n?(?:</tool_response>)?$", re.DOTALL)


@dataclass(frozen=True)
class Message:
    """One turn of the conversation as shown: `role` is system, user, assistant or tool."""

    role: str
    text: str
    tool_calls: tuple[str, ...] = ()
    generated: bool = False  # written by the model in this trace (its trained tokens)


def run_tokenizer(config: dict) -> Path | None:
    """The run's own tokenizer folder (its `model.name`, a named model already prepared or a
    local folder), so reports show text without `--tokenizer`; None when it is not on this machine."""
    from ..models import MODEL_NAMES, is_prepared, model_dir

    model = config.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    if not isinstance(name, str) or not name:
        return None
    if name in MODEL_NAMES:
        return model_dir(name) if is_prepared(name) else None
    path = Path(name).expanduser()
    return path if (path / "tokenizer_config.json").is_file() else None


def messages(trace: Trace, decode: Decode) -> tuple[Message, ...]:
    """The conversation of one trace, in order; the sampled reply marked `generated`."""
    prompt = decode(trace.token_ids[:trace.prompt_length])
    reply = decode(trace.token_ids[trace.prompt_length:])
    found = _split(prompt, generated=False) + _split(reply, generated=True, open_role="assistant")
    return tuple(message for message in found if message.text or message.tool_calls)


def _split(text: str, *, generated: bool, open_role: str | None = None) -> tuple[Message, ...]:
    if "<|im_start|>" not in text:
        if not text.strip():
            return ()
        return (_message(open_role or "text", text, generated=generated),)
    head, _, _ = text.partition("<|im_start|>")
    found = [_message(open_role, head, generated=generated)] if open_role and head.strip() else []
    found += [_message(role, body, generated=generated) for role, body in TURN.findall(text)]
    return tuple(found)


def _message(role: str | None, body: str, *, generated: bool) -> Message:
    body = body.replace("<|im_end|>", "").strip()
    response = TOOL_RESPONSE.match(body)
    if role == "user" and response:
        return Message("tool", response.group(1).strip(), generated=generated)
    calls = tuple(call.strip() for call in TOOL_CALL.findall(body))
    text = TOOL_CALL.sub("", body).strip() if calls else body
    return Message(role or "assistant", text, calls, generated=generated)


def conversation(rollout: Rollout, decode: Decode) -> tuple[Message, ...]:
    """The rollout's longest trace (a linear episode is one trace) as messages."""
    if not rollout.traces:
        return ()
    return messages(max(rollout.traces, key=lambda trace: len(trace.token_ids)), decode)


def excerpt(rollout: Rollout, decode: Decode, *, last: int = 4, chars: int = 160) -> list[str]:
    """The end of a failed rollout's conversation in a few short lines (report.md); the system
    prompt, the same for every rollout, is left to report.html."""
    lines = []
    for message in [m for m in conversation(rollout, decode) if m.role != "system"][-last:]:
        text = " ".join(message.text.split())
        if message.tool_calls:
            text = (text + " " if text else "") + " ".join(f"→ {' '.join(call.split())}" for call in message.tool_calls)
        if len(text) > chars:
            text = text[:chars - 3] + "..."
        lines.append(f"{message.role}: {text}")
    return lines
