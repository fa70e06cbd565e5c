"""Starting a task's MCP servers in a live local session (`mcp_servers.py` has the declaration).

`stdio` servers are only named to the agent (its MCP client starts them as its own children,
inside the session). `http` servers are started here through the session's sandbox (so in its
namespaces, cgroup and network namespace, with its environment and working directory) as
background commands, which the sandbox kills when the session ends; the agent is invoked only
once each one accepts connections on the session's loopback. A server that exits or does not
listen in time fails the session as `task_error` (the task's server is broken, not the agent),
with its output.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import Any

from ..mcp_servers import McpServer
from ..records import Status
from ._local_session import AgentFailed
from .sandbox import BackgroundProcess, ExecResult, SessionSandbox

# Run inside the session: connect to the port until it answers (the session's own loopback,
# which only a process in its network namespace can reach).
_PROBE = (
    "import socket, sys, time\n"
    "deadline = time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < deadline:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1).close()\n"
    "        sys.exit(0)\n"
    "    except OSError:\n"
    "        time.sleep(0.05)\n"
    "sys.exit(3)\n"
)


def free_port() -> int:
    """A port free on the host's loopback (a session with its own network namespace has every
    port free; one sharing the host's network needs one nobody holds)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def start_servers(servers: Sequence[McpServer], payload: dict[str, Any], *,
                        sandbox: Callable[[], SessionSandbox], python: str) -> dict[str, Any]:
    """`payload` with `_rollout.mcp_servers` set, every `http` server listening first."""
    if not servers:
        return payload
    connections = {}
    for server in servers:
        if server.transport == "stdio":
            connections[server.name] = server.connection(python=python)
            continue
        port = free_port()
        await _start_http(server, sandbox(), python=python, port=port)
        connections[server.name] = server.connection(python=python, port=port)
    return {**payload, "_rollout": {**payload["_rollout"], "mcp_servers": connections}}


async def _start_http(server: McpServer, sandbox: SessionSandbox, *, python: str, port: int) -> None:
    argv = server.argv(python=python, port=port)
    handle = await sandbox.exec(argv, env=dict(server.env), timeout=None, background=True)
    assert isinstance(handle, BackgroundProcess)
    probe = asyncio.ensure_future(sandbox.exec(
        [python, "-I", "-c", _PROBE, str(port), str(server.ready_timeout_s)],
        timeout=server.ready_timeout_s + 10))
    exited = asyncio.ensure_future(handle.result())
    try:
        await asyncio.wait({probe, exited}, return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            raise _failed(server, port, "it exited before listening", exited.result())
        listened = probe.result()
        assert isinstance(listened, ExecResult)
        if not listened.ok:
            raise _failed(server, port, f"it did not listen within ready_timeout_s="
                                        f"{server.ready_timeout_s:g}s", await handle.kill())
    finally:
        for task in (probe, exited):
            task.cancel()


def _failed(server: McpServer, port: int, what: str, result: ExecResult) -> AgentFailed:
    output = (result.stderr.strip() or result.stdout.strip())[-2000:] or "(no output)"
    code = "killed" if result.exit_code is None else f"exit code {result.exit_code}"
    return AgentFailed(Status.TASK_ERROR, (
        f"MCP server {server.name!r} ({' '.join(result.argv)}) on the session's 127.0.0.1:{port}: "
        f"{what} ({code}); fix the task's McpServer command. Its output:\n{output}"))
