"""The office tools as plain functions over the working directory (the session's files): the
LangGraph agent (`agent.py`) wraps them as LangChain tools, the MCP server (`office_mcp_server.py`)
serves them over the Model Context Protocol. Same names, arguments and docstrings in both, so a
model sees the same tools either way."""

from __future__ import annotations

import csv
import functools
import email
import email.policy
import re
from email.message import EmailMessage
from pathlib import Path
from typing import Any

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TIME = re.compile(r"^\d{2}:\d{2}$")
CELL = re.compile(r"^([A-Z])([1-9]\d?)$")
MAX_READ_CHARS = 4000


# --- the files --------------------------------------------------------------------------------


def _path(name: str) -> Path:
    """`name` inside the working directory, or ValueError (the model gets the message)."""
    root = Path.cwd().resolve()
    path = (root / (name or ".")).resolve()
    if path != root and root not in path.parents:
        raise ValueError(f"{name!r} is outside your files")
    return path


def seed(files: dict[str, str], tables: dict[str, list[list[Any]]]) -> None:
    """Write the task's starting files into the working directory."""
    for name, text in (files or {}).items():
        path = _path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for name, rows in (tables or {}).items():
        path = _path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        _save_rows(path, rows)


def _load_rows(path: Path) -> list[list[str]]:
    if path.suffix == ".xlsx":
        from openpyxl import load_workbook

        sheet = load_workbook(path).active
        return [["" if v is None else str(v) for v in row] for row in sheet.iter_rows(values_only=True)]
    with path.open(newline="", encoding="utf-8") as handle:
        return [list(row) for row in csv.reader(handle)]


def _save_rows(path: Path, rows: list[list[Any]]) -> None:
    if path.suffix == ".xlsx":
        from openpyxl import Workbook

        book = Workbook()
        for row in rows:
            book.active.append(list(row))
        book.save(path)
        return
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)


def _show_rows(rows: list[list[str]]) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "\n".join(
        f"row {number}: " + " | ".join(f"{letters[col]}={value}" for col, value in enumerate(row))
        for number, row in enumerate(rows, start=1)
    )


def _show_calendar(text: str) -> str:
    from icalendar import Calendar

    lines = []
    for event in Calendar.from_ical(text).walk("VEVENT"):
        start, end = event.decoded("DTSTART"), event.decoded("DTEND")
        lines.append(f"event: {event.get('SUMMARY')} | date: {start:%Y-%m-%d} | start: {start:%H:%M} | end: {end:%H:%M}")
    return "\n".join(lines) or "(no events)"


def _show_mail(data: bytes) -> str:
    message = email.message_from_bytes(data, policy=email.policy.default)
    body = message.get_body(preferencelist=("plain",))
    text = body.get_content().strip() if body is not None else ""
    return f"From: {message['From']}\nTo: {message['To']}\nSubject: {message['Subject']}\n\n{text}"


# --- the tools (short names and flat string arguments: a small model's best chance) ------------


def ls(path: str = ".") -> str:
    """List the files in a folder, e.g. mail/inbox or data."""
    folder = _path(path)
    if not folder.is_dir():
        return f"error: {path} is not a folder"
    entries = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            entries.append(f"{entry.name}/")
        elif entry.suffix == ".eml":
            message = email.message_from_bytes(entry.read_bytes(), policy=email.policy.default)
            # The sender first, the file name right after it: a small model finds the name the
            # task gives, then copies what follows it.
            entries.append(f"from: {message['From']} | {entry.name} | subject: {message['Subject']}")
        else:
            entries.append(entry.name)
    return "\n".join(entries) or "(empty)"


def read(path: str) -> str:
    """Read a file: an email (.eml), a calendar (.ics), a sheet (.csv/.xlsx) or a document (.md)."""
    file = _path(path)
    if not file.is_file():
        return f"error: no file {path}; use ls to see the files"
    if file.suffix == ".eml":
        text = _show_mail(file.read_bytes())
    elif file.suffix == ".ics":
        text = _show_calendar(file.read_text(encoding="utf-8"))
    elif file.suffix in (".csv", ".xlsx"):
        text = _show_rows(_load_rows(file))
    else:
        text = file.read_text(encoding="utf-8", errors="replace")
    return text[:MAX_READ_CHARS]


def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to one address."""
    if "@" not in to or "," in to:
        return "error: to must be one email address, like alice@example.com"
    outbox = _path("mail/sent")
    outbox.mkdir(parents=True, exist_ok=True)
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "me@example.com", to.strip(), subject
    message.set_content(body)
    number = len(list(outbox.glob("*.eml"))) + 1
    (outbox / f"{number:03d}.eml").write_bytes(message.as_bytes())
    return f"sent to {to.strip()}"


def add_event(path: str, title: str, date: str, start: str, end: str) -> str:
    """Add an event to a calendar file (.ics). date is YYYY-MM-DD, start and end are HH:MM."""
    from datetime import datetime

    from icalendar import Calendar, Event

    if not DATE.match(date) or not TIME.match(start) or not TIME.match(end):
        return "error: date must be YYYY-MM-DD and start/end HH:MM, e.g. 2024-05-17 and 10:30"
    file = _path(path)
    if file.suffix != ".ics":
        return "error: path must be a calendar file ending in .ics"
    try:
        begin = datetime.strptime(f"{date} {start}", "%Y-%m-%d %H:%M")
        finish = datetime.strptime(f"{date} {end}", "%Y-%m-%d %H:%M")
    except ValueError as exc:
        return f"error: {exc}"
    if finish <= begin:
        return "error: end must be after start"
    calendar = Calendar.from_ical(file.read_text(encoding="utf-8")) if file.is_file() else Calendar()
    event = Event()
    event.add("uid", f"{begin:%Y%m%dT%H%M}-{len(calendar.subcomponents)}@office")
    event.add("summary", title)
    event.add("dtstart", begin)
    event.add("dtend", finish)
    calendar.add_component(event)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(calendar.to_ical())
    return f"added {title} on {date} {start}-{end}"


def write(path: str, text: str) -> str:
    """Write a document (.md or .txt), replacing what it held."""
    file = _path(path)
    if file.suffix not in (".md", ".txt"):
        return "error: write makes .md or .txt files; use set_cell for sheets"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    return f"wrote {path}"


def set_cell(path: str, cell: str, value: str) -> str:
    """Set one cell of a sheet (.csv or .xlsx), e.g. cell E1."""
    file = _path(path)
    match = CELL.match(cell.strip().upper())
    if not match:
        return "error: cell must be a column letter and a row number, like E1"
    if file.suffix not in (".csv", ".xlsx") or not file.is_file():
        return f"error: no sheet {path}; use ls data"
    rows = _load_rows(file)
    column, row = ord(match.group(1)) - ord("A"), int(match.group(2)) - 1
    while len(rows) <= row:
        rows.append([])
    rows[row] += [""] * (column + 1 - len(rows[row]))
    rows[row][column] = value
    _save_rows(file, rows)
    return f"set {cell.upper()} to {value}"


NAMES = ("ls", "read", "send_email", "add_event", "write", "set_cell")


def guarded(function: Any) -> Any:
    """The tool, with a bad path or a broken file answered to the model as `error: ...` text it
    can react to (the LangGraph agent's tools and the MCP server's both)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> str:
        try:
            return function(*args, **kwargs)
        except (ValueError, OSError, KeyError) as exc:
            return f"error: {exc}"

    return run
