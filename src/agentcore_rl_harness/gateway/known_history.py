"""`KnownHistory`: the messages a session's wire already checked and translated, so that a turn
checks and translates only what is new.

An agent re-sends its whole history every turn: 200 turns in, a request holds 199 turns of
messages the gateway already shape-checked, history-checked and translated. A session keeps its
last few requests' messages twice, as they arrived (parsed JSON) and as translated (internal
messages). A new request whose messages start with one of those (one C-level comparison of the
parsed JSON) has only its tail checked and translated; the known part's internal messages are
handed on as the same objects as before, so the turn tree matches them by identity, and the
session holds one copy of the history, not one per request.

What "known" guarantees: each known message is equal (==) to a message that passed every
per-message check in an earlier request of this session, and the request's history check is re-run
from the last non-tool message before the tail (its state depends on nothing earlier). Parsed
JSON compares exactly for strings, lists and objects; numbers and booleans can compare equal
across types (1 == 1.0 == True) where a translation would not (tool-call arguments sent as an
object), so a message holding such arguments ends what may be known (`plain`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NOTHING_KNOWN", "Known", "KnownHistory", "plain_chat_message"]

# Requests remembered per session and wire: the latest few cover retries, forks and a sub-agent.
KEPT = 4


@dataclass(frozen=True)
class Known:
    """The first `count` messages of a request: as kept (`raw`) and translated (`internal`)."""

    count: int
    raw: tuple[Any, ...] = ()
    internal: tuple[Any, ...] = ()


NOTHING_KNOWN = Known(0)


def plain_chat_message(message: Any) -> bool:
    """A chat message whose translation equality decides: no tool call with arguments sent as a
    JSON object (the standard is a string)."""
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if not calls or not isinstance(calls, list):
        return True
    return all(isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
               and isinstance(call["function"].get("arguments", ""), str) for call in calls)


class KnownHistory:
    """The latest requests' messages of one session, per wire. Thread-safe."""

    def __init__(self, kept: int = KEPT) -> None:
        self._entries: dict[str, deque[tuple[tuple[Any, ...], tuple[Any, ...]]]] = {}
        self._kept = kept
        self._lock = threading.Lock()

    def match(self, wire: str, raw: Sequence[Any]) -> Known:
        """The longest start of `raw` this session's `wire` already translated, found in its
        latest requests (newest first); always leaves at least the last message unknown."""
        with self._lock:
            entries = tuple(self._entries.get(wire, ()))
        best = NOTHING_KNOWN
        for kept_raw, kept_internal in reversed(entries):
            count = min(len(kept_raw), len(raw) - 1)
            if count > best.count and tuple(raw[:count]) == kept_raw[:count]:
                best = Known(count, kept_raw[:count], kept_internal[:count])
        return best

    def remember(self, wire: str, known: Known, raw: Sequence[Any], internal: Sequence[Any],
                 plain: Callable[[Any], bool]) -> None:
        """Keep a request whose every message passed the checks: `known` as matched, `raw` as it
        arrived and `internal` its translation, one internal message per raw one. Its known part
        is kept as the objects already held; `plain` says up to where equality may be trusted."""
        if len(raw) != len(internal):
            raise ValueError(f"{len(raw)} messages translated to {len(internal)}: not one to one")
        end = next((i for i in range(known.count, len(raw)) if not plain(raw[i])), len(raw))
        if end == 0:
            return
        entry = (known.raw + tuple(raw[known.count:end]), known.internal + tuple(internal[known.count:end]))
        with self._lock:
            entries = self._entries.setdefault(wire, deque(maxlen=self._kept))
            entries.append(entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
