"""A trace as text: the run's tokenizer turns token ids into per-token text and a transcript.

The tokenizer is the one the run's config names (`model.name`: a prepared named model or a local
HF folder), or `--tokenizer`. The viewer never prepares or downloads a model: without a local
tokenizer the token view shows ids and says how to get text. The transcript splits a trace at
the chat template's turn markers (ChatML: `<|im_start|>ROLE ... <|im_end|>`); a template
without them is shown as its mask runs (context / trained).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
THINK = re.compile(r"<think>(.*?)</think>", re.S)
TOOL_RESPONSE = re.compile(r"^\s*<tool_response>\s*(.*?)\s*</tool_response>\s*$", re.S)


@dataclass(frozen=True)
class Tokenizer:
    """Decodes ids, or says why it cannot (`path` None and `note` set)."""

    path: Path | None
    note: str

    def decode(self, token_ids: Sequence[int]) -> str:
        if self.path is None:
            return " ".join(str(token) for token in token_ids)
        loaded = _load(str(self.path))
        with loaded.lock:
            return loaded.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def pieces(self, token_ids: Sequence[int]) -> list[str]:
        """The text of each token on its own (a byte-level piece of a character shows as �)."""
        if self.path is None:
            return [str(token) for token in token_ids]
        loaded = _load(str(self.path))
        with loaded.lock:
            return [loaded.piece(token) for token in token_ids]

    def marker(self, text: str) -> int | None:
        if self.path is None:
            return None
        loaded = _load(str(self.path))
        with loaded.lock:
            token = loaded.tokenizer.convert_tokens_to_ids(text)
            unknown = loaded.tokenizer.unk_token_id
        return token if isinstance(token, int) and token != unknown else None


class _Loaded:
    """A tokenizer and the lock its calls take: a fast (Rust) tokenizer used from two threads
    at once raises 'Already borrowed', and the server renders pages on a thread pool."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.lock = threading.Lock()
        self.piece = functools.lru_cache(maxsize=None)(
            lambda token: self.tokenizer.decode([token], skip_special_tokens=False))


_loading = threading.Lock()


def _load(path: str) -> _Loaded:
    with _loading:
        return _cached(path)


@functools.lru_cache(maxsize=4)
def _cached(path: str) -> _Loaded:
    return _Loaded(path)


def find_tokenizer(model_name: str | None, override: Path | None) -> Tokenizer:
    """The tokenizer to decode a run's traces with, found locally or not at all."""
    if override is not None:
        if not (Path(override) / "tokenizer_config.json").is_file():
            return Tokenizer(None, f"--tokenizer {override} has no tokenizer_config.json; "
                                   "showing token ids")
        return Tokenizer(Path(override), "")
    if not model_name:
        return Tokenizer(None, "the run's config.yaml names no model; pass --tokenizer DIR "
                               "to see token text")
    from ..models import MODEL_NAMES, is_prepared, model_dir

    if model_name in MODEL_NAMES:
        if is_prepared(model_name):
            return Tokenizer(model_dir(model_name), "")
        return Tokenizer(None, f"model {model_name!r} is not prepared here; run `agentcore-rl "
                               f"models prepare {model_name}` (or pass --tokenizer DIR) to see text")
    folder = Path(model_name).expanduser()
    if (folder / "tokenizer_config.json").is_file():
        return Tokenizer(folder, "")
    return Tokenizer(None, f"model {model_name!r} is not a local folder with a tokenizer; pass "
                           "--tokenizer DIR to see token text")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One turn of a transcript. `trained` is True when its tokens carry loss mask 1."""

    role: str
    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    trained: bool
    start: int
    end: int


def transcript(trace: dict[str, Any], tokenizer: Tokenizer) -> list[Message]:
    token_ids = trace["token_ids"]
    mask = [0] * trace["prompt_length"] + list(trace["loss_mask"])
    start_id, end_id = tokenizer.marker(TURN_START), tokenizer.marker(TURN_END)
    if start_id is None or end_id is None:
        return _by_mask(token_ids, mask, tokenizer)
    messages, position = [], 0
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
        messages.append(_message(role.strip(), body.removesuffix(TURN_END), any(mask[start:end]),
                                 start, end))
        position = end
    return messages or _by_mask(token_ids, mask, tokenizer)


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
        return ToolCall(str(call["name"]), json.dumps(call.get("arguments"), ensure_ascii=False))
    except (ValueError, KeyError, TypeError):
        return ToolCall("(unparsed)", raw)


def _by_mask(token_ids: Sequence[int], mask: Sequence[int], tokenizer: Tokenizer) -> list[Message]:
    messages, start = [], 0
    for position in range(1, len(token_ids) + 1):
        if position == len(token_ids) or mask[position] != mask[start]:
            role = "assistant" if mask[start] else "context"
            messages.append(Message(role, tokenizer.decode(token_ids[start:position]), "", (),
                                    bool(mask[start]), start, position))
            start = position
    return messages
