"""The office pack's reward: checks of a session's final files, parsed here, never by the agent.

`read_state(sandbox)` fetches the files (a listing with `find`, then `get_file` each: nothing runs
inside the sandbox that the agent could have shadowed, e.g. a planted `json.py`). `score(row,
state)` runs the row's `evaluation` checks (OfficeBench's shape: `{function, args}`; each is one
unit of partial credit) and its `guards`: mail only to the expected recipients, none of the
`forbidden` texts in any mail, every seeded file still there and unchanged except the `targets`
(and there, only the asked-for change: other cells of a sheet, the events already in a
calendar). A failed guard zeroes the reward, so spamming mail or rewriting files cannot earn.
"""

from __future__ import annotations

import csv
import email
import email.policy
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentcore_rl_harness.errors import SandboxError

MAX_FILES = 200
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Score:
    """Per-check results (name -> passed), failed guards (reasons), and the reward they give."""

    checks: dict[str, bool]
    guard_failures: list[str]

    @property
    def reward(self) -> float:
        if self.guard_failures or not self.checks:
            return 0.0
        return sum(self.checks.values()) / len(self.checks)

    @property
    def success(self) -> bool:
        return bool(self.checks) and all(self.checks.values()) and not self.guard_failures


async def read_state(sandbox: Any) -> dict[str, bytes]:
    """The session's regular files (path relative to its directory -> bytes); a file that cannot
    be read counts as absent."""
    listing = await sandbox.exec(["find", ".", "-type", "f", "-size", f"-{MAX_FILE_BYTES // 1024}k", "-print0"],
                                 timeout=60)
    if listing.exit_code != 0:
        raise RuntimeError(f"listing the session's files failed ({listing.exit_code}): {listing.stderr[-500:]!r}")
    paths = sorted(name[2:] for name in listing.stdout.split("\0") if name.startswith("./"))
    state = {}
    for path in paths[:MAX_FILES]:
        try:
            state[path] = await sandbox.get_file(path)
        except SandboxError:  # vanished or unreadable: the checks see it as missing
            continue
    return state


# --- parsing ------------------------------------------------------------------------------------


def sent_mail(state: dict[str, bytes]) -> list[dict[str, str]]:
    mails = []
    for path in sorted(p for p in state if p.startswith("mail/sent/") and p.endswith(".eml")):
        try:
            message = email.message_from_bytes(state[path], policy=email.policy.default)
            body = message.get_body(preferencelist=("plain",))
            mails.append({"to": str(message["To"] or "").strip().lower(), "subject": str(message["Subject"] or ""),
                          "body": body.get_content() if body is not None else ""})
        except Exception:  # a file the agent garbled is no mail at all
            continue
    return mails


def events(data: bytes | None) -> list[tuple[str, str, str, str]]:
    """(title, date, start, end) of each event of a calendar file; [] if it does not parse."""
    if data is None:
        return []
    from icalendar import Calendar

    try:
        found = []
        for event in Calendar.from_ical(data).walk("VEVENT"):
            start, end = event.decoded("DTSTART"), event.decoded("DTEND")
            if not isinstance(start, datetime) or not isinstance(end, datetime):
                continue
            found.append((str(event.get("SUMMARY", "")).strip(), f"{start:%Y-%m-%d}", f"{start:%H:%M}",
                          f"{end:%H:%M}"))
        return found
    except Exception:  # not a calendar any more
        return []


def cells(path: str, data: bytes | None) -> list[list[str]] | None:
    if data is None:
        return None
    try:
        if path.endswith(".xlsx"):
            from openpyxl import load_workbook

            sheet = load_workbook(io.BytesIO(data)).active
            rows = [["" if v is None else str(v) for v in row] for row in sheet.iter_rows(values_only=True)]
        else:
            rows = [list(row) for row in csv.reader(io.StringIO(data.decode("utf-8")))]
    except Exception:  # not a sheet any more
        return None
    return [[value.strip() for value in row] for row in rows]


def cell_value(rows: list[list[str]] | None, ref: str) -> str | None:
    column, row = ord(ref[0].upper()) - ord("A"), int(ref[1:]) - 1
    if rows is None or row >= len(rows) or column >= len(rows[row]):
        return None
    return rows[row][column]


def contains(haystack: str, needle: str) -> bool:
    """Case-insensitive containment; a number must stand alone (`12` is not in `123`)."""
    if needle.isdigit():
        return re.search(rf"(?<!\d){needle}(?!\d)", haystack) is not None
    return needle.lower() in haystack.lower()


def same_value(found: str | None, wanted: str) -> bool:
    if found is None:
        return False
    try:
        return float(found) == float(wanted)
    except ValueError:
        return found.strip().lower() == wanted.strip().lower()


# --- the checks ----------------------------------------------------------------------------------


def email_to(state: dict[str, bytes], *, to: str) -> bool:
    return any(mail["to"] == to.lower() for mail in sent_mail(state))


def email_contains(state: dict[str, bytes], *, to: str, text: str) -> bool:
    return any(mail["to"] == to.lower() and contains(mail["subject"] + "\n" + mail["body"], text)
               for mail in sent_mail(state))


def email_subject(state: dict[str, bytes], *, to: str, text: str) -> bool:
    return any(mail["to"] == to.lower() and mail["subject"].strip().lower() == text.lower()
               for mail in sent_mail(state))


def event_titled(state: dict[str, bytes], *, path: str, title: str) -> bool:
    return any(found[0].lower() == title.lower() for found in events(state.get(path)))


def event_at(state: dict[str, bytes], *, path: str, title: str, date: str, start: str, end: str) -> bool:
    return (title.lower(), date, start, end) in {(t.lower(), d, s, e) for t, d, s, e in events(state.get(path))}


def cell_equals(state: dict[str, bytes], *, path: str, cell: str, value: str) -> bool:
    return same_value(cell_value(cells(path, state.get(path)), cell), value)


def file_contains(state: dict[str, bytes], *, path: str, text: str) -> bool:
    data = state.get(path)
    return data is not None and contains(data.decode("utf-8", errors="replace"), text)


CHECKS: dict[str, Callable[..., bool]] = {
    "email_to": email_to, "email_contains": email_contains, "email_subject": email_subject,
    "event_titled": event_titled, "event_at": event_at, "cell_equals": cell_equals,
    "file_contains": file_contains,
}


# --- guards -------------------------------------------------------------------------------------


def seeded(row: dict[str, Any]) -> dict[str, bytes | list[list[str]]]:
    """What the row put in the session: text files as bytes, tables as rows of strings."""
    found: dict[str, bytes | list[list[str]]] = {p: t.encode("utf-8") for p, t in (row.get("files") or {}).items()}
    for path, rows in (row.get("tables") or {}).items():
        found[path] = [[str(value) for value in r] for r in rows]
    return found


def changed_cells(before: list[list[str]], after: list[list[str]]) -> set[str]:
    refs = set()
    for r in range(max(len(before), len(after))):
        old = before[r] if r < len(before) else []
        new = after[r] if r < len(after) else []
        for c in range(max(len(old), len(new))):
            if (old[c] if c < len(old) else "") != (new[c] if c < len(new) else ""):
                refs.add(f"{chr(ord('A') + c)}{r + 1}")
    return refs


def guard_failures(row: dict[str, Any], state: dict[str, bytes]) -> list[str]:
    guards = row.get("guards") or {}
    failures = []
    allowed = {to.lower() for to in guards.get("recipients", [])}
    for mail in sent_mail(state):
        if mail["to"] not in allowed:
            failures.append(f"mail sent to {mail['to']!r}, who is not part of the task")
        for text in guards.get("forbidden", []):
            if contains(mail["subject"] + "\n" + mail["body"], text):
                failures.append(f"mail to {mail['to']!r} leaks {text!r}")
    asked_cells = {(c["args"]["path"], c["args"]["cell"]) for c in row["evaluation"] if c["function"] == "cell_equals"}
    targets = set(guards.get("targets", []))
    for path, before in seeded(row).items():
        after = state.get(path)
        if after is None:
            failures.append(f"{path} is gone")
        elif path not in targets:
            unchanged = (cells(path, after) == before) if isinstance(before, list) else after == before
            if not unchanged:
                failures.append(f"{path} was changed, but the task does not ask for it")
        elif path.endswith(".ics"):
            missing = set(events(before)) - set(events(after))
            if missing:
                failures.append(f"{path} lost its events {sorted(missing)}")
        elif path.endswith((".csv", ".xlsx")):
            old = before if isinstance(before, list) else cells(path, before) or []
            new = cells(path, after)
            extra = changed_cells(old, new or []) - {ref for p, ref in asked_cells if p == path}
            if new is None or extra:
                failures.append(f"{path}: cells {sorted(extra) or 'all'} changed, but the task does not ask for it")
    return failures


def score(row: dict[str, Any], state: dict[str, bytes]) -> Score:
    checks = {}
    for index, spec in enumerate(row["evaluation"]):
        name = f"{index}.{spec['function']}"
        checks[name] = bool(CHECKS[spec["function"]](state, **spec["args"]))
    return Score(checks=checks, guard_failures=guard_failures(row, state))
