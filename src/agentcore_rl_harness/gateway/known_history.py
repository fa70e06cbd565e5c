"""`KnownHistory`: the messages a session's wire already checked and translated, so that a turn
checks and translates only what is new, on every wire (chat `messages`, Anthropic `messages`,
Responses `input` items; `turn_routes.read_turn_request` drives it).

An agent re-sends its whole history every turn: 200 turns in, a request holds 199 turns of
messages the gateway already shape-checked, history-checked and translated. A session keeps its
last few requests' messages twice, as they arrived (parsed JSON) and as translated (internal
messages). A new request whose messages start with one of those (one C-level comparison of the
parsed JSON) has only its tail checked and translated; the known part's internal messages are
handed on as the same objects as before, so the turn tree matches them by identity, and the
session holds one copy of the history, not one per request. The kept messages are runs
(`tokens.TokenRun`): a request's messages are the known ones' run extended in place by its new
ones, so a turn never copies, walks or re-counts the history it holds (each such pass over 400
messages costs tens of microseconds once the history is out of the CPU's caches).

Wires whose translation is not one message to one (`bounds`). An Anthropic user message with
tool results becomes several internal messages, consecutive Responses items fold into one
assistant message, and both wires put a head (Anthropic `system`, Responses `instructions`) first.
A request is kept with its head as it arrived and, per count of leading raw messages, how many
internal messages they made (None where a known part may not end: a Responses item the next one
may still fold into). A known part matches only under an equal head, and ends at a count whose
bound is set.

What "known" guarantees: each known message is equal (==) to a message that passed every
per-message check in an earlier request of this session, and the request's history check is re-run
from the last non-tool message before the tail (its state depends on nothing earlier). Parsed
JSON compares exactly for strings, lists and objects; numbers and booleans can compare equal
across types (1 == 1.0 == True) where a translation would not (tool-call arguments sent as an
object), so a message holding such arguments ends what may be known (`plain`).

Known bytes. A client that serialises deterministically (the SDKs: `json.dumps` of a list it
appends to) re-sends the previous body's bytes up to the end of its last message. The latest
requests keep those bytes (a view of the body as received: no copy) and where their `messages`
array opens (`_layout`); a body starting with them (one memcmp: every byte of the known part is
compared, so a change anywhere in it, even of one byte, is a body parsed whole) and going on
with `,` is parsed without them: `orjson.loads` of the head +
`[` + what follows the comma, which is the request with only its new messages (keys, values and
their order as in the body: nothing else was cut). Identical bytes parse to identical values, so
every known message counts then, `plain` or not. `_layout` finds the array with a token scan of
what is new only (the head and the known messages were scanned before), refuses a body whose top
level names `messages` twice or with escapes (the last would win), and must count as many
messages as the parser did, else the bytes are not kept; a body that does not start with kept
bytes is scanned in full only up to `SCAN_MAX_BYTES` and `WASTED_SCANS` times in a row, later
ones of that conversation are then compared as parsed JSON.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .tokens import TokenRun

__all__ = ["NOTHING_KNOWN", "Known", "KnownHistory", "plain_chat_message", "text_leaves_only"]

# Requests remembered per session and wire: the latest few cover retries, forks and a sub-agent;
# the newest KEPT_BYTES of them keep their bytes too (about one body each).
KEPT = 4
KEPT_BYTES = 2
# A body that starts with no kept bytes is scanned whole for its layout (at Python speed: ~0.75 ms
# for 64 KB) only up to this size, and only while a session's wire has not had WASTED_SCANS such
# scans in a row that no later body used (a client that never re-sends the same bytes).
SCAN_MAX_BYTES = 32 * 1024
WASTED_SCANS = 3


@dataclass(frozen=True)
class Known:
    """The first `count` messages of a request: as kept (`raw`) and translated (`internal`);
    the first `plain` of them compare exactly as parsed JSON. `layout`: where the body's messages
    array opens, where its last message ends and how many it holds, when its known bytes were
    split off (`KnownHistory.split`). `raw`, `internal` and `bounds` are views of the kept
    request's runs (`tokens.TokenRun`): extending them appends in place, copying nothing."""

    count: int
    raw: Sequence[Any] = ()
    internal: Sequence[Any] = ()
    plain: int = 0
    layout: tuple[int, int, int] | None = None
    head: Any = None  # the head the internal messages start with (e.g. Anthropic `system`)
    bounds: Sequence[int | None] | None = None  # per count 0..count; None: one to one


NOTHING_KNOWN = Known(0)


@dataclass(frozen=True)
class _Entry:
    raw: TokenRun
    internal: TokenRun
    plain: int  # leading messages whose equality as parsed JSON may be trusted
    prefix: memoryview | None = None  # the body up to the end of its last message (a view: no copy)
    opened: int = -1  # where its messages array opens ('[')
    head: Any = None
    bounds: TokenRun | None = None

    def known(self, count: int, layout: tuple[int, int, int] | None = None) -> Known:
        if self.bounds is None:
            return Known(count, self.raw.first(count), self.internal.first(count), min(count, self.plain), layout)
        return Known(count, self.raw.first(count), self.internal.first(self.bounds[count]), min(count, self.plain),
                     layout, self.head, self.bounds.first(count + 1))


def _run(known: Sequence[Any], whole: Sequence[Any]) -> TokenRun:
    """`whole` as a run whose start is `known` (the objects already held): `whole` itself when
    it extends `known`'s run or nothing is known (no copy), else `known` extended by the rest of
    `whole`."""
    if isinstance(whole, TokenRun) and (not known or whole.starts_with(known)):
        return whole
    return TokenRun.of(known).extended(whole[len(known):])


def plain_chat_message(message: Any) -> bool:
    """A chat message whose translation equality decides: no tool call with arguments sent as a
    JSON object (the standard is a string)."""
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if not calls or not isinstance(calls, list):
        return True
    return all(isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
               and isinstance(call["function"].get("arguments", ""), str) for call in calls)


def text_leaves_only(value: Any, *, keys: int = 1 << 30) -> bool:
    """Every leaf of `value` (parsed JSON) is a string or null, and no object in it has more
    than `keys` keys: then an equal (==) value is the same JSON, key order included where it
    has one key at most (numbers and booleans compare equal across types, objects regardless of
    their keys' order)."""
    if isinstance(value, str) or value is None:
        return True
    if isinstance(value, list):
        return all(text_leaves_only(item, keys=keys) for item in value)
    if isinstance(value, dict):
        return len(value) <= keys and all(text_leaves_only(item, keys=keys) for item in value.values())
    return False


class KnownHistory:
    """The latest requests' messages of one session, per wire. Thread-safe."""

    def __init__(self, kept: int = KEPT) -> None:
        self._entries: dict[str, deque[_Entry]] = {}
        self._unused_scans: dict[str, int] = {}
        self._kept = kept
        self._lock = threading.Lock()

    def _latest(self, wire: str) -> tuple[_Entry, ...]:
        with self._lock:
            return tuple(reversed(self._entries.get(wire, ())))

    def match(self, wire: str, raw: Sequence[Any], head: Any = None) -> Known:
        """The longest start of `raw` this session's `wire` already translated under an equal
        `head`, found in its latest requests (newest first); always leaves at least the last
        message unknown."""
        best = NOTHING_KNOWN
        for entry in self._latest(wire):
            count = min(entry.plain, len(raw) - 1)
            if entry.bounds is not None:
                while count > 0 and entry.bounds[count] is None:
                    count -= 1
            if count > best.count and entry.head == head and tuple(raw[:count]) == entry.raw[:count]:
                best = entry.known(count)
        return best

    def split(self, wire: str, body: bytes, key: str = "messages") -> tuple[Known, dict[str, Any]] | None:
        """When `body` starts with a kept request's bytes and goes on with more messages (in its
        top-level array `key`): what is known, and the body parsed without the known messages;
        else None (parse it all). The caller compares the head (it is in the parsed body)."""
        for entry in self._latest(wire):
            prefix = entry.prefix
            if prefix is None or len(body) <= len(prefix) or not body.startswith(prefix):
                continue
            if entry.bounds is not None and entry.bounds[-1] is None:
                continue  # its last item may fold into the next one: not a place to cut
            comma = _SPACE.match(body, len(prefix)).end()
            if body[comma:comma + 1] != b",":
                continue  # the same messages again (a retry): nothing new to split off
            try:
                rest = orjson.loads(body[:entry.opened + 1] + body[comma + 1:])
            except orjson.JSONDecodeError:
                return None  # the whole body's parse words the error
            count = len(entry.raw)
            needle = b'"' + key.encode() + b'"'
            layout = _layout(body, comma, entry.opened, count, needle)  # one `key`, no escaped keys
            if layout is None or not isinstance(rest, dict) or not isinstance(rest.get(key), list) \
                    or layout[2] != count + len(rest[key]):
                return None
            with self._lock:
                self._unused_scans[wire] = 0
            return entry.known(count, layout), rest
        return None

    def remember(self, wire: str, known: Known, raw: Sequence[Any], internal: Sequence[Any],
                 plain: Callable[[Any], bool], body: bytes | None = None, *, key: str = "messages",
                 head: Any = None, bounds: Sequence[int | None] | None = None) -> None:
        """Keep a request whose every message passed the checks: `known` as found, `raw` its
        messages as they arrived (`raw[known.count:]` at least) and `internal` their translation,
        one internal message per raw one, or with `bounds` (one per count 0..len(raw), see the
        module docstring) after `head` as translated; `body`, when given, the request's bytes
        (its messages in the top-level array `key`). The known part is kept as the objects
        already held: `raw` and `internal` as they are when they are runs extending the known
        ones (`tokens.TokenRun`, what `turn_routes` hands over), else copied into runs once;
        `plain` says up to where equality may be trusted."""
        if bounds is None and len(raw) != len(internal):
            raise ValueError(f"{len(raw)} messages translated to {len(internal)}: not one to one")
        if bounds is not None and (len(bounds) != len(raw) + 1 or bounds[-1] not in (None, len(internal))):
            raise ValueError(f"{len(raw)} messages with {len(bounds)} bounds ending at {bounds[-1]} for "
                             f"{len(internal)} internal messages: give one bound per count 0..{len(raw)}")
        if not raw:
            return
        if known.plain < known.count:
            trusted = known.plain
        else:
            trusted = next((i for i in range(known.count, len(raw)) if not plain(raw[i])), len(raw))
        entry = _Entry(_run(known.raw, raw), _run(known.internal, internal), trusted, head=head,
                       bounds=None if bounds is None else TokenRun.of(bounds))
        layout = known.layout
        if layout is None and body is not None and len(body) <= SCAN_MAX_BYTES \
                and self._unused_scans.get(wire, 0) < WASTED_SCANS:
            layout = _layout(body, -1, -1, 0, b'"' + key.encode() + b'"')
            with self._lock:
                self._unused_scans[wire] = self._unused_scans.get(wire, 0) + 1
        if layout is not None and layout[2] == len(raw):
            entry = dataclasses.replace(entry, prefix=memoryview(body)[:layout[1]], opened=layout[0])
        with self._lock:
            entries = self._entries.setdefault(wire, deque(maxlen=self._kept))
            entries.append(entry)
            for index in range(len(entries) - KEPT_BYTES):
                if entries[index].prefix is not None:
                    entries[index] = dataclasses.replace(entries[index], prefix=None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._unused_scans.clear()


# --- where a body's messages are (a token scan of valid JSON: orjson parsed it) ---------------

_SPACE = re.compile(rb"[ \t\r\n]*")
_TOKEN = re.compile(rb'[ \t\r\n]*("[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]|[^ \t\r\n\[\]{},:"]+)')
_TO_BRACKET = re.compile(rb'(?:"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}])*([\[\]{}])')
_OPEN = (b"[", b"{")


class _Unknown(Exception):
    """Not a layout this module takes apart."""


class _Tokens:
    def __init__(self, body: bytes, position: int) -> None:
        self.body, self.position, self.start = body, position, position

    def next(self) -> bytes:
        found = _TOKEN.match(self.body, self.position)
        if found is None:
            raise _Unknown
        self.start, self.position = found.start(1), found.end()
        return found.group(1)

    def skip(self, first: bytes) -> None:
        """Past the value that starts with token `first` (from bracket to bracket)."""
        depth = 1 if first in _OPEN else 0
        while depth:
            found = _TO_BRACKET.match(self.body, self.position)
            if found is None:
                raise _Unknown
            self.position = found.end()
            depth += 1 if found.group(1) in _OPEN else -1

    def elements(self, token: bytes, count: int) -> tuple[int, int]:
        """From an array's element starting with `token` to its `]`: (elements, where the last
        one ends)."""
        while True:
            self.skip(token)
            count, end = count + 1, self.position
            token = self.next()
            if token == b"]":
                return count, end
            if token != b",":
                raise _Unknown
            token = self.next()

    def members(self, token: bytes, found: tuple[int, int, int] | None = None,
                needle: bytes = b'"messages"') -> tuple[int, int, int]:
        """An object's members from `token` (a key, or `}`) on, one of them (or `found`, met
        before) `needle` (a quoted key) holding an array: (where it opens, where it closes, its
        elements); nothing may follow the object."""
        while token != b"}":
            if not token.startswith(b'"') or b"\\" in token or self.next() != b":":
                raise _Unknown
            value = self.next()
            if token == needle:
                if found is not None or value != b"[":
                    raise _Unknown
                opened = self.start
                first = self.next()
                count, end = (0, opened + 1) if first == b"]" else self.elements(first, 0)
                found = (opened, end, count)
            else:
                self.skip(value)
            token = self.next()
            if token == b",":
                token = self.next()
            elif token != b"}":
                raise _Unknown
        if found is None or _SPACE.match(self.body, self.position).end() != len(self.body):
            raise _Unknown
        return found


def _layout(body: bytes, comma: int = -1, opened: int = -1, count: int = 0,
            needle: bytes = b'"messages"') -> tuple[int, int, int] | None:
    """(where the array of key `needle` (quoted, e.g. `"messages"`) opens, where its last message
    ends, how many messages) in `body`, a JSON object, or None for a layout this module does not
    take apart; from `comma` on when everything before it (the head and `count` messages in an
    array opened at `opened`) was scanned before."""
    try:
        if comma < 0:
            tokens = _Tokens(body, 0)
            if tokens.next() != b"{":
                return None
            return tokens.members(tokens.next(), needle=needle)
        tokens = _Tokens(body, comma + 1)
        count, end = tokens.elements(tokens.next(), count)
        token = tokens.next()
        if token == b",":
            token = tokens.next()
        elif token != b"}":
            return None
        return tokens.members(token, (opened, end, count), needle)
    except _Unknown:
        return None
