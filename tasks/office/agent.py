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

from typing import Any

import office_tools
from bedrock_agentcore import BedrockAgentCoreApp
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from office_tools import seed

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


# --- the tools (plain functions in office_tools.py; short names and flat string arguments) -----


def office_tool(function: Any) -> Any:
    """A LangChain tool whose bad input (a path outside the files, a broken file) comes back
    to the model as an `error: ...` result it can react to, instead of ending the graph."""

    return tool(office_tools.guarded(function))


ls, read, send_email, add_event, write, set_cell = (
    office_tool(getattr(office_tools, name)) for name in office_tools.NAMES)
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
