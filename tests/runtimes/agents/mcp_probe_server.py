"""A small MCP server for the runtime's MCP tests: `where` says where it runs (cwd, network
namespace inode, its marker argument), `echo` echoes. stdio by default, `--port N` for HTTP."""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe", log_level="WARNING")


@server.tool()
def where() -> str:
    """Where this server runs."""
    return f"cwd={os.getcwd()} netns={os.readlink('/proc/self/ns/net')} argv={' '.join(sys.argv[1:])}"


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


if __name__ == "__main__":
    if "--exit" in sys.argv:
        print("probe server: refusing to start (--exit)", file=sys.stderr)
        sys.exit(7)
    if "--port" in sys.argv:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--port") + 1]))
    else:
        server.run("stdio")
