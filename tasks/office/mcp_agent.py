"""The office agent with its tools served over MCP: a Strands Agents agent in a Bedrock
AgentCore Runtime app, run unchanged, using Strands' own MCP client (`strands.tools.mcp`).

The task (`test_office_mcp`) declares the office MCP server (`office_mcp_server.py`); the
harness starts it per session and names it in `_rollout.mcp_servers["office"]`: a streamable
HTTP URL on the session's own loopback, or a stdio command this agent's MCP client starts as its
child. Deployed elsewhere, the same entry can point at any MCP server. The model is the gateway
(`_rollout.base_url`, `api_key`) through Strands' `OpenAIModel`. Strands' failure modes end the
episode as the agent's outcome (`stopped`): a reply cut at `max_tokens`, or more model calls than
the budget (`max_model_calls`, default 8); the reward scores the files as they are.
"""

from __future__ import annotations

from typing import Any

from bedrock_agentcore import BedrockAgentCoreApp
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from office_tools import seed
from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.hooks import BeforeModelCallEvent
from strands.models.openai import OpenAIModel
from strands.tools.mcp import MCPClient
from strands.types.exceptions import MaxTokensReachedException

app = BedrockAgentCoreApp()

SERVER = "office"  # the task's McpServer name
MAX_TOKENS = 256
MODEL_TIMEOUT_S = 3600
MAX_MODEL_CALLS = 8
SYSTEM_PROMPT = (
    "You are an office assistant. Your files are in mail/, calendar/, docs/ and data/. "
    "Use the tools to do the task, one step at a time. Dates are YYYY-MM-DD, times HH:MM. "
    "When the task is done, reply with one short sentence."
)
EXAMPLE_TASK = "Find the email from Hugo in mail/inbox and forward the code in it to Ivy (ivy@example.com)."
EXAMPLE_CALLS = [
    ("ls", {"path": "mail/inbox"},
     "from: grace@example.com | p2x7.eml | subject: Lunch\nfrom: hugo@example.com | w3f9.eml | subject: Door code"),
    ("read", {"path": "mail/inbox/w3f9.eml"},
     "From: hugo@example.com\nTo: me@example.com\nSubject: Door code\n\nThe code is 5172."),
    ("send_email", {"to": "ivy@example.com", "subject": "Code", "body": "The code is 5172."},
     "sent to ivy@example.com"),
]
EXAMPLE_ANSWER = "I forwarded the code 5172 to Ivy."


def example_messages() -> list[dict[str, Any]]:
    """One worked example as real turns, in Strands' message shape."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": EXAMPLE_TASK}]}]
    for step, (name, arguments, result) in enumerate(EXAMPLE_CALLS):
        use_id = f"example-{step}"
        messages.append({"role": "assistant", "content": [{"toolUse": {"toolUseId": use_id, "name": name, "input": arguments}}]})
        messages.append({"role": "user", "content": [{"toolResult": {"toolUseId": use_id, "status": "success",
                                                                      "content": [{"text": result}]}}]})
    messages.append({"role": "assistant", "content": [{"text": EXAMPLE_ANSWER}]})
    return messages


def mcp_client(connection: dict[str, Any]) -> MCPClient:
    """Strands' MCP client for one `_rollout.mcp_servers` entry."""
    if connection["transport"] == "streamable_http":
        return MCPClient(url=connection["url"])
    if connection["transport"] == "stdio":
        parameters = StdioServerParameters(command=connection["command"], args=connection["args"],
                                           env=connection.get("env"))
        return MCPClient(lambda: stdio_client(parameters))
    raise ValueError(f"MCP server {SERVER!r}: unsupported transport {connection['transport']!r}")


def budget_of(payload: dict[str, Any]) -> int:
    calls = payload.get("max_model_calls", MAX_MODEL_CALLS)
    if type(calls) is not int or not 1 <= calls <= 32:
        raise ValueError(f"payload max_model_calls must be an integer from 1 to 32, got {calls!r}")
    return calls


@app.entrypoint
def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    rollout = payload["_rollout"]
    servers = rollout.get("mcp_servers") or {}
    if SERVER not in servers:
        raise ValueError(f"this agent needs the MCP server {SERVER!r} in _rollout.mcp_servers, got {sorted(servers)}; "
                         "declare it on the task: @arl.task(mcp_servers=[arl.McpServer(name='office', ...)])")
    budget = budget_of(payload)
    seed(payload.get("files") or {}, payload.get("tables") or {})
    model = OpenAIModel(client_args={"base_url": rollout["base_url"], "api_key": rollout["api_key"],
                                     "max_retries": 0, "timeout": MODEL_TIMEOUT_S},
                        model_id=rollout["model_id"], params={"max_tokens": MAX_TOKENS})
    calls = {"model": 0}

    def limit(event: BeforeModelCallEvent) -> None:
        calls["model"] += 1
        if calls["model"] > budget:
            event.cancel = f"stopped: {budget} model calls used"

    with mcp_client(servers[SERVER]) as client:
        offered = payload.get("tools")
        tools = [t for t in client.list_tools_sync() if offered is None or t.tool_name in offered]
        agent = Agent(model=model, tools=tools, system_prompt=SYSTEM_PROMPT, messages=example_messages(),
                      callback_handler=None, conversation_manager=NullConversationManager())
        agent.add_hook(limit, BeforeModelCallEvent)
        start = len(agent.messages)
        stopped, answer = None, ""
        try:
            answer = str(agent(payload["task"])).strip()
        except MaxTokensReachedException:
            stopped = "max_tokens"
        if calls["model"] > budget:
            stopped = "model_call_budget"
        names = [block["toolUse"]["name"] for message in agent.messages[start:] if message["role"] == "assistant"
                 for block in message["content"] if "toolUse" in block]
    return {"answer": answer, "tool_calls": names, "model_calls": min(calls["model"], budget),
            "stopped": stopped, "tools": sorted(t.tool_name for t in tools)}


if __name__ == "__main__":
    app.run()
