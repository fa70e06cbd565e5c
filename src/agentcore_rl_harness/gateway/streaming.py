"""Incremental streaming: text deltas while tokens are sampled, one driver for every wire.

`ReplyStreamer` turns sampled token ids into reasoning and content deltas whose concatenations are
always prefixes of what the final parse (`Renderer.parse_reply`) returns, so a client that joins
the deltas gets exactly the JSON reply and its next request matches the recorded turn. It holds
text back while it is ambiguous:

- a reply that starts with (or may still become) `<think>` streams reasoning, stripped as the
  parse strips it, until `</think>`; templates that open `<think>` in the generation prompt
  stream reasoning from the first token;
- content stops before the first tool-call marker (`<tool_call>`, `<function=`, `<|python_tag|>`)
  and before any trailing partial marker, so raw markup never leaks into a content delta;
- trailing whitespace waits for the next visible character (a reply with tool calls is stripped);
- content that starts with whitespace or `{`/`[` (a bare Llama JSON call) waits for the end.

One case cannot be streamed exactly: a reply that closes `</think>` it never opened (and whose
prompt did not open it) turns the text already sent into reasoning. The stream then ends with
what was sent, and the session counts `stream_mismatches`.

Tool calls are sent once the reply is parsed, at the end. `stream_turn` runs the sample as its own
task: if the client disconnects, the sample still completes and is recorded (sampled tokens are
never dropped) and the session counts `client_disconnects`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import HarnessError, RenderError, SamplingError
from .passthrough import ChatBackend
from .rendering import ParsedReply, Renderer
from .sampling import SamplingBackend
from .turn import PreparedTurn, TurnResult, sample_turn

logger = logging.getLogger(__name__)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_MARKERS = ("<tool_call>", "<function=", "<|python_tag|>")


def sse(data: dict[str, Any]) -> str:
    """One server-sent event's `data:` line (and the blank line ending it)."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


@dataclass(frozen=True)
class Delta:
    kind: str  # "reasoning" or "content"
    text: str


def _without_partial(text: str, markers: Sequence[str]) -> str:
    """`text` minus its longest suffix that could still grow into one of `markers`."""
    for size in range(min(len(text), max(map(len, markers)) - 1), 0, -1):
        if any(marker.startswith(text[-size:]) for marker in markers):
            return text[:-size]
    return text


def _stable_content(content: str, *, after_think: bool) -> str:
    if not content or (not after_think and content[0].isspace()) or content[0] in "{[":
        return ""
    markers = TOOL_MARKERS if after_think else (*TOOL_MARKERS, THINK_CLOSE)
    cuts = [content.find(marker) for marker in markers if marker in content]
    content = content[:min(cuts)] if cuts else _without_partial(content, markers)
    return content.rstrip()


def stable_parts(text: str, *, think_open: bool = False) -> tuple[str, str]:
    """(reasoning, content) of a partial reply that no later token can change."""
    head = THINK_OPEN + text if think_open else text.lstrip()
    if len(head) < len(THINK_OPEN) and THINK_OPEN.startswith(head):
        return "", ""
    if not head.startswith(THINK_OPEN):
        return "", _stable_content(text, after_think=False)
    inner = head[len(THINK_OPEN):]
    end = inner.find(THINK_CLOSE)
    if end < 0:
        return _without_partial(inner, (THINK_CLOSE,)).strip(), ""
    rest = inner[end + len(THINK_CLOSE):].lstrip()
    return inner[:end].strip(), _stable_content(rest, after_think=True)


class IncrementalDecoder:
    """Token ids -> text increments (holds back an incomplete UTF-8 character)."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        before = self._decode(self._ids[self._prefix_offset:self._read_offset])
        after = self._decode(self._ids[self._prefix_offset:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before):]


class ReplyStreamer:
    """Sampled token ids in, `Delta`s out; `finish` completes them to the parsed reply."""

    def __init__(self, *, decode: Callable[[Sequence[int]], str], stop_token_ids: Sequence[int],
                 think_open: bool = False) -> None:
        self._decoder = IncrementalDecoder(decode)
        self._stops = frozenset(stop_token_ids)
        self._think_open = think_open
        self._text = ""
        self.sent_reasoning = ""
        self.sent_content = ""

    def push(self, token_id: int) -> list[Delta]:
        if token_id in self._stops:
            return []
        self._text += self._decoder.push(token_id)
        return self._advance(*stable_parts(self._text, think_open=self._think_open))

    def finish(self, reply: ParsedReply) -> tuple[list[Delta], bool]:
        """The remaining deltas, and False if what was sent is not a prefix of the reply."""
        reasoning, content = reply.reasoning or "", reply.content
        consistent = reasoning.startswith(self.sent_reasoning) and content.startswith(self.sent_content)
        consistent = consistent and (not self.sent_content or reasoning == self.sent_reasoning)
        return (self._advance(reasoning, content) if consistent else []), consistent

    def _advance(self, reasoning: str, content: str) -> list[Delta]:
        deltas = []
        if len(reasoning) > len(self.sent_reasoning) and reasoning.startswith(self.sent_reasoning) \
                and not self.sent_content:
            deltas.append(Delta("reasoning", reasoning[len(self.sent_reasoning):]))
            self.sent_reasoning = reasoning
        if len(content) > len(self.sent_content) and content.startswith(self.sent_content):
            deltas.append(Delta("content", content[len(self.sent_content):]))
            self.sent_content = content
        return deltas


def prompt_opens_think(renderer: Renderer, prompt_token_ids: Sequence[int]) -> bool:
    """True when the generation prompt itself opens a `<think>` block (Qwen3.5, DeepSeek-R1)."""
    tail = renderer.decode(list(prompt_token_ids[-8:])).rstrip()
    return tail.endswith(THINK_OPEN)


class WireStream(Protocol):
    """One wire's SSE grammar: what to send at the start, per delta, at the end, on failure."""

    def start(self) -> list[str]: ...

    def delta(self, delta: Delta) -> list[str]: ...

    def finish(self, result: TurnResult) -> list[str]: ...

    def error(self, status: int, message: str) -> list[str]: ...


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a streamed turn failed after its client went away: %s", task.exception())


async def stream_turn(
    prepared: PreparedTurn, *, sampler: SamplingBackend, renderer: Renderer, wire: WireStream,
    background: set[asyncio.Task], chat: ChatBackend | None = None,
) -> AsyncIterator[str]:
    """The SSE body of one streamed turn, sent as tokens are sampled (a pass-through turn's
    reply, `chat`, is sent whole when it arrives)."""
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    streamer = ReplyStreamer(decode=renderer.decode, stop_token_ids=prepared.params.stop_token_ids,
                             think_open=prompt_opens_think(renderer, prepared.plan.prompt_token_ids))
    task = asyncio.ensure_future(sample_turn(
        prepared, sampler=sampler, renderer=renderer, chat=chat,
        on_token=lambda token_id, logprob: queue.put_nowait(token_id)))
    background.add(task)
    task.add_done_callback(background.discard)
    task.add_done_callback(lambda _: queue.put_nowait(None))
    completed = False
    try:
        for event in wire.start():
            yield event
        while (token_id := await queue.get()) is not None:
            for delta in streamer.push(token_id):
                for event in wire.delta(delta):
                    yield event
        try:
            result = task.result()
        except (SamplingError, RenderError) as exc:
            completed = True
            for event in wire.error(502 if isinstance(exc, SamplingError) else 400, str(exc)):
                yield event
            return
        except HarnessError as exc:
            completed = True
            for event in wire.error(409, str(exc)):
                yield event
            return
        deltas, consistent = streamer.finish(result.reply)
        if not consistent:
            logger.warning("streamed text diverged from the parsed reply in session %s",
                           prepared.session.session_id)
            prepared.session.count_event("stream_mismatches")
        for delta in deltas:
            for event in wire.delta(delta):
                yield event
        for event in wire.finish(result):
            yield event
        completed = True
    finally:
        if not completed:
            prepared.session.count_event("client_disconnects")
            task.add_done_callback(_log_failure)
