"""The office tools (`office_tools.py`) served over the Model Context Protocol, for the MCP level
(`test_office_mcp` in test_office.py, agent `mcp_agent.py`).

    python office_mcp_server.py                      # stdio: an MCP client starts it as its child
    python office_mcp_server.py --http --port 8765   # streamable HTTP at http://127.0.0.1:8765/mcp

The task declares it (`arl.McpServer`); the harness starts the HTTP one inside each session's
sandbox, in the session's working directory, so the tools act on that session's files. Bad tool
input comes back to the model as `error: ...`, as in the LangGraph agent.
"""

from __future__ import annotations

import argparse

import office_tools
from mcp.server.mcpserver import MCPServer


def build_server() -> MCPServer:
    server = MCPServer("office", instructions="Office files: mail/, calendar/, docs/, data/.", log_level="WARNING")
    for name in office_tools.NAMES:
        server.tool(name=name)(office_tools.guarded(getattr(office_tools, name)))
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = build_server()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
