"""The office agent: a LangGraph tool loop in a Bedrock AgentCore Runtime app, run unchanged.

Its tools work on the files of its own working directory (the session's sandbox): a mailbox
(`mail/inbox/*.eml`, sent mail goes to `mail/sent/`), calendars (`calendar/*.ics`), documents
(`docs/*.md`) and sheets (`data/*.csv`, `data/*.xlsx`). The invoke payload carries the task and
the files to start from (`files`: path -> text, `tables`: .xlsx path -> rows), which the agent
writes into its directory first: on AgentCore Runtime the same payload seeds the microVM.

It talks to the model through langchain-openai at `_rollout.base_url` with `_rollout.api_key`
(the rollout gateway during RL; any OpenAI-compatible endpoint otherwise). LangGraph's own
failure modes end the episode the way a user's app would: a recursion limit (the graph ran out
of steps) or a malformed tool call is the agent's failure, returned in its result (`stopped`)
with the conversation so far; the task's reward then scores whatever the files hold.
"""

from __future__ import annotations

import csv
import email
import functools
import email.policy
import re
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from bedrock_agentcore import BedrockAgentCoreApp
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

app = BedrockAgentCoreApp()

MAX_TOKENS = 256
MODEL_TIMEOUT_S = 3600  # one model call; a loaded CPU box batching 16 sessions is slow
MAX_MODEL_CALLS = 8  # per episode unless the payload's `max_model_calls` says (1-32)
# LangGraph counts a model call and a tool round as one step each: n model calls need 2n steps.
SYSTEM_PROMPT = (
    "You are an office assistant. Your files are in mail/, calendar/, docs/ and data/. "
    "Use the tools to do the task, one step at a time. Dates are YYYY-MM-DD, times HH:MM. "
    "When the task is done, reply with one short sentence."
)
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


def office_tool(function: Any) -> Any:
    """A LangChain tool whose bad input (a path outside the files, a broken file) comes back
    to the model as an `error: ...` result it can react to, instead of ending the graph."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> str:
        try:
            return function(*args, **kwargs)
        except (ValueError, OSError, KeyError) as exc:
            return f"error: {exc}"

    return tool(run)


@office_tool
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


@office_tool
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


@office_tool
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


@office_tool
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


@office_tool
def write(path: str, text: str) -> str:
    """Write a document (.md or .txt), replacing what it held."""
    file = _path(path)
    if file.suffix not in (".md", ".txt"):
        return "error: write makes .md or .txt files; use set_cell for sheets"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    return f"wrote {path}"


@office_tool
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


TOOLS = [ls, read, send_email, add_event, write, set_cell]


# --- one worked example, sent as real turns (a small model imitates turns far better than prose) --

EXAMPLE = [
    ("Find the email from Hugo in mail/inbox and forward the code in it to Ivy (ivy@example.com).", [
        ("ls", {"path": "mail/inbox"},
         "from: grace@example.com | p2x7.eml | subject: Lunch\n"
         "from: hugo@example.com | w3f9.eml | subject: Door code"),
        ("read", {"path": "mail/inbox/w3f9.eml"},
         "From: hugo@example.com\nTo: me@example.com\nSubject: Door code\n\nThe code is 5172."),
        ("send_email", {"to": "ivy@example.com", "subject": "Code", "body": "The code is 5172."},
         "sent to ivy@example.com"),
    ], "I forwarded the code 5172 to Ivy."),
]


def example_turns() -> list[Any]:
    messages: list[Any] = []
    for index, (task, calls, answer) in enumerate(EXAMPLE):
        messages.append(HumanMessage(task))
        for step, (name, arguments, result) in enumerate(calls):
            call_id = f"example-{index}-{step}"
            messages.append(AIMessage("", tool_calls=[{"id": call_id, "name": name, "args": arguments}]))
            messages.append(ToolMessage(result, tool_call_id=call_id))
        messages.append(AIMessage(answer))
    return messages


# --- the graph --------------------------------------------------------------------------------


def offered_tools(names: list[str] | None) -> list[Any]:
    """The tools a task offers (`payload["tools"]`, names; default all six): a task that needs
    one app can offer only its tools, which keeps the prompt short."""
    if names is None:
        return list(TOOLS)
    known = {tool.name: tool for tool in TOOLS}
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        raise ValueError(f"payload tools must be a non-empty subset of {sorted(known)}, got {names!r}")
    return [tool for tool in TOOLS if tool.name in names]


def recursion_limit(max_model_calls: Any) -> int:
    """LangGraph's recursion limit for at most `max_model_calls` model calls (the payload's,
    default MAX_MODEL_CALLS): a task that needs 4 calls can stop a wandering episode early."""
    calls = MAX_MODEL_CALLS if max_model_calls is None else max_model_calls
    if type(calls) is not int or not 1 <= calls <= 32:
        raise ValueError(f"payload max_model_calls must be an integer from 1 to 32, got {max_model_calls!r}; "
                         f"leave it out for the default {MAX_MODEL_CALLS}")
    return 2 * calls


def build_graph(model: Any, tools: list[Any] = TOOLS) -> Any:
    """The ReAct loop as LangGraph users write it: a model node, a ToolNode, tools_condition."""
    bound = model.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile()


def summarize(messages: list[Any], stopped: str | None) -> dict[str, Any]:
    """The agent's result: its last reply, which tools it called, and why it stopped early."""
    replies = [m for m in messages if isinstance(m, AIMessage)]
    calls = [call["name"] for m in replies for call in m.tool_calls]
    last = replies[-1] if replies else None
    answer = last.content if last is not None and isinstance(last.content, str) else ""
    if stopped is None and last is not None and (last.invalid_tool_calls or "<tool_call>" in answer):
        stopped = "malformed_tool_call"  # the model tried to call a tool and the call did not parse
    return {"answer": answer, "tool_calls": calls, "model_calls": len(replies), "stopped": stopped}


@app.entrypoint
def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    rollout = payload["_rollout"]
    tools = offered_tools(payload.get("tools"))
    limit = recursion_limit(payload.get("max_model_calls"))
    seed(payload.get("files") or {}, payload.get("tables") or {})
    model = ChatOpenAI(
        base_url=rollout["base_url"], api_key=rollout["api_key"], model=rollout["model_id"],
        max_tokens=MAX_TOKENS, max_retries=0, timeout=MODEL_TIMEOUT_S,
    )
    start = [SystemMessage(SYSTEM_PROMPT), *example_turns(), HumanMessage(payload["task"])]
    graph = build_graph(model, tools)
    messages: list[Any] = start
    stopped = None
    try:
        for state in graph.stream({"messages": start}, {"recursion_limit": limit},
                                  stream_mode="values"):
            messages = state["messages"]
    except GraphRecursionError:
        stopped = "recursion_limit"
    return summarize(messages[len(start):], stopped)


if __name__ == "__main__":
    app.run()
