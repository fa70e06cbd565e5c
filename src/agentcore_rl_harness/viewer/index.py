"""A run directory's rollouts.jsonl as an index: one small row per rollout, with its byte range.

The index is built once per run directory and then only extended: `refresh` reads the bytes
appended since the last call (a running run flushes each rollout as it ends), so a live run
costs one `stat` per poll. A rewritten file (a resume moved rollouts aside) is noticed by its
inode or a shrink and indexed again. Only the summary fields are parsed: the record's `traces`
(by far its largest part, and last in the line) are cut off before `json.loads` and read back
by byte range when one rollout's page asks for them.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from ..store import ROLLOUTS

DEMO_PHASE = "demo"  # run/cases.py's DEMO_PHASE (a layer above): the warm-up's demonstrations
TRACES_KEY = b', "traces": ['
CHUNK = 8 << 20
SEARCH_CHARS = 600  # of the result and error kept for search
OUTCOMES = ("all", "success", "failure")


@dataclass(frozen=True)
class RolloutRow:
    """What the rollout table shows of one record (and where the whole record is)."""

    number: int
    offset: int
    length: int
    task: str
    row_id: str
    sample_index: int
    phase: str
    step: int | None
    status: str
    success: bool | None
    reward: float | None
    rewards: dict[str, float]
    turns: int
    tokens: int
    elapsed_s: float
    session_id: str
    error: str
    haystack: str

    @property
    def demo(self) -> bool:
        return self.phase == DEMO_PHASE

    @property
    def failed(self) -> bool:
        return self.success is not True


@dataclass(frozen=True)
class Filter:
    """A table query; empty fields match everything. `outcome` is all, success or failure."""

    task: str = ""
    phase: str = ""
    status: str = ""
    outcome: str = "all"
    search: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise HarnessError(f"outcome={self.outcome!r} is not one of {', '.join(OUTCOMES)}")

    def matches(self, row: RolloutRow) -> bool:
        return ((not self.task or row.task == self.task)
                and (not self.phase or row.phase == self.phase)
                and (not self.status or row.status == self.status)
                and (self.outcome == "all" or row.failed == (self.outcome == "failure"))
                and (not self.search or self.search.lower() in row.haystack))


@dataclass(frozen=True)
class Page:
    rows: tuple[RolloutRow, ...]
    matched: int
    total: int
    start: int


class RunIndex:
    """The rollouts of one run directory, indexed by byte range. Safe to use from any thread."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / ROLLOUTS
        self._lock = threading.Lock()
        self._rows: list[RolloutRow] = []
        self._size = 0
        self._inode: int | None = None
        self.bad_lines: list[str] = []

    def refresh(self) -> int:
        """Index what was appended since the last call; return how many rollouts there are."""
        with self._lock:
            try:
                stat = os.stat(self.path)
            except FileNotFoundError:
                return len(self._rows)
            if stat.st_ino != self._inode or stat.st_size < self._size:
                self._rows, self._size, self._inode, self.bad_lines = [], 0, stat.st_ino, []
            if stat.st_size > self._size:
                self._read_from(self._size)
            return len(self._rows)

    def _read_from(self, start: int) -> None:
        """Index whole lines from byte `start`, reading `CHUNK` bytes at a time (a 50,000-rollout
        file is never in memory at once); an unterminated last line is a write in progress."""
        with open(self.path, "rb") as handle:
            handle.seek(start)
            carry, position = b"", start
            while chunk := handle.read(CHUNK):
                data = carry + chunk
                end = data.rfind(b"\n") + 1
                cursor = 0
                while cursor < end:
                    newline = data.index(b"\n", cursor)
                    if newline > cursor and not data[cursor:newline].isspace():
                        self._add(data[cursor:newline], position + cursor)
                    cursor = newline + 1
                position += end
                carry = data[end:]
        self._size = position

    def _add(self, line: bytes, offset: int) -> None:
        try:
            record = summary_fields(line)
            self._rows.append(_row(record, len(self._rows), offset, len(line)))
        except (ValueError, KeyError, TypeError) as exc:
            self.bad_lines.append(f"{self.path} at byte {offset}: not a rollout record ({exc})")

    def rows(self) -> tuple[RolloutRow, ...]:
        with self._lock:
            return tuple(self._rows)

    def page(self, query: Filter, *, start: int = 0, limit: int = 100) -> Page:
        rows = self.rows()
        matched = [row for row in rows if query.matches(row)]
        return Page(tuple(matched[start:start + limit]), len(matched), len(rows), start)

    def row(self, number: int) -> RolloutRow:
        rows = self.rows()
        if not 0 <= number < len(rows):
            raise HarnessError(f"{self.path} has no rollout number {number} (it has {len(rows)})")
        return rows[number]

    def record(self, number: int) -> dict[str, Any]:
        """The whole record of rollout `number` (traces included), read by its byte range."""
        row = self.row(number)
        with open(self.path, "rb") as handle:
            handle.seek(row.offset)
            return json.loads(handle.read(row.length))


def summary_fields(line: bytes) -> dict[str, Any]:
    """The record without its traces. `traces` is the last key the store writes; the cut is
    tried at each `, "traces": [` from the left: one inside `result` leaves unbalanced JSON, and
    the top-level one comes before any inside the traces."""
    cut = line.find(TRACES_KEY)
    while cut > 0:
        try:
            record = json.loads(line[:cut] + b"}")
            if isinstance(record, dict) and "status" in record:
                return record
        except ValueError:
            pass  # this `"traces": [` sits inside `result`; try the next one
        cut = line.find(TRACES_KEY, cut + 1)
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not an object")
    return record


def _row(record: dict[str, Any], number: int, offset: int, length: int) -> RolloutRow:
    usage = record.get("usage") or {}
    error = record.get("error") or ""
    result = json.dumps(record.get("result"), ensure_ascii=False)[:SEARCH_CHARS]
    fields = (record["task"], str(record["row_id"]), record["status"], record.get("session_id", ""),
              record["phase"], error[:SEARCH_CHARS], result)
    rewards = record.get("rewards") or {}
    return RolloutRow(
        number=number, offset=offset, length=length, task=record["task"],
        row_id=str(record["row_id"]), sample_index=int(record.get("sample_index", 0)),
        phase=record["phase"], step=record.get("step"), status=record["status"],
        success=record.get("success"), reward=record.get("reward"),
        rewards={str(name): value for name, value in rewards.items()},
        turns=int(record.get("turns") or 0),
        tokens=int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0),
        elapsed_s=float(record.get("elapsed_s") or 0.0), session_id=str(record.get("session_id", "")),
        error=error, haystack="\n".join(fields).lower(),
    )
