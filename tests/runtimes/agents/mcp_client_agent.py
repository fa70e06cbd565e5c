"""Calls every MCP server in `_rollout.mcp_servers` with the `mcp` SDK's own clients (stdio or
streamable HTTP) and returns what each server's `where` and `echo` tools answered, with its own
cwd and network namespace to compare. With `hold_s` in the payload it writes that answer to
`answers.json` in its directory and waits (at most `hold_s`) for a file `release` there, so a
test can look at the live session and its servers.
"""

import asyncio
import json
import os
import time

from bedrock_agentcore import BedrockAgentCoreApp
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

app = BedrockAgentCoreApp()


async def call(connection):
    if connection["transport"] == "stdio":
        transport = stdio_client(StdioServerParameters(command=connection["command"], args=connection["args"],
                                                       env=connection.get("env")))
    else:
        transport = streamable_http_client(connection["url"])
    async with transport as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            where = (await session.call_tool("where", {})).content[0].text
            echo = (await session.call_tool("echo", {"text": "hi"})).content[0].text
            return {"tools": tools, "where": where, "echo": echo}


@app.entrypoint
async def invoke(payload):
    servers = payload["_rollout"].get("mcp_servers") or {}
    answers = {name: await call(connection) for name, connection in servers.items()}
    result = {"servers": servers, "answers": answers, "cwd": os.getcwd(),
              "netns": os.readlink("/proc/self/ns/net")}
    if payload.get("hold_s"):
        with open("answers.json.tmp", "w") as out:
            json.dump(result, out)
        os.rename("answers.json.tmp", "answers.json")
        deadline = time.monotonic() + payload["hold_s"]
        while not os.path.exists("release") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    return result


if __name__ == "__main__":
    app.run()
