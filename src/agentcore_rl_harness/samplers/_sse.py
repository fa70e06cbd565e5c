"""Server-sent events, parsed as the WHATWG HTML spec says (section 9.2.6, "Interpreting an event stream").

Incremental over the byte chunks of a response body: lines end in CRLF, LF or CR (a CR at the end
of one chunk and an LF at the start of the next are one line end); the first line may carry a
UTF-8 BOM; a line starting with `:` is a comment (keep-alives); `field: value` drops one space
after the colon; several `data:` lines of one event join with `\\n`; `event:` names the event
(`message` when absent); a blank line dispatches the event (one with no `data:` line is not an
event); a partial event when the stream ends is discarded.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Feed body chunks, get the complete events they finish (in order)."""

    def __init__(self) -> None:
        self._tail: list[bytes] = []  # the pieces of an unfinished line (joined once it ends: O(n) per line)
        self._skip_lf = False  # the previous chunk ended in CR: an LF opening this one ends nothing
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        if not chunk:
            return []
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            self._tail.append(chunk)  # still inside one line
            return []
        complete, rest = chunk[:end + 1], chunk[end + 1:]
        if self._tail:
            self._tail.append(complete)
            complete = b"".join(self._tail)
        self._tail = [rest] if rest else []
        self._skip_lf = complete.endswith(b"\r") and not rest
        events: list[ServerSentEvent] = []
        for raw in complete.splitlines():  # bytes: splits on \r\n, \n, \r only
            event = self._line(raw.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not self._started:
            self._started = True
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None  # a comment
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None  # unknown fields are ignored

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(data="\n".join(data), event=event or "message", id=self._last_id, retry=self._retry)
