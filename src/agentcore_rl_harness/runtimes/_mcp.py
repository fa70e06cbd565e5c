"""Starting a task's MCP servers in a live local session (`mcp_servers.py` has the declaration).

`stdio` servers are only named to the agent (its MCP client starts them as its own children,
inside the session). `http` servers are started here through the session's sandbox (so in its
namespaces, cgroup and network namespace, with its environment and working directory) as
background commands, which the sandbox kills when the session ends; the agent is invoked only
once each one accepts connections on the session's loopback.

Before a server's first use in a run, its first session checks it once: its command must be
found inside the session, and a `stdio` server, handed an MCP `initialize` request and then the
end of its input, must answer or exit cleanly within its `ready_timeout_s` (one that exits with an
error and says nothing on stdout crashed at start; one that says nothing at all would hang the
agent's MCP client). A server that fails a check, exits before listening or does not listen
in time fails the session as `task_error` (the task's server is broken, not the agent), with its
output; a server that failed its check is not started again in that run.
"""

from __future__ import annotations

import asyncio
import json
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
# Prints each command the session cannot run (a path: not an executable file; a name: not on PATH).
_MISSING = ('for c; do case $c in */*) [ -f "$c" ] && [ -x "$c" ] ;; *) command -v "$c" >/dev/null 2>&1 ;; '
            'esac || echo "$c"; done')
_INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "agentcore-rl-harness", "version": "0"}}}) + "\n"


def free_port() -> int:
    """A port free on the host's loopback (a session with its own network namespace has every
    port free; one sharing the host's network needs one nobody holds)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class McpStarter:
    """The MCP servers of a local runtime's sessions: checks each server once per run, starts the
    `http` ones per session and names them all to the agent."""

    def __init__(self, *, python: str) -> None:
        self.python = python
        self._checks: dict[McpServer, asyncio.Future[str | None]] = {}  # server -> its error

    async def start(self, servers: Sequence[McpServer], payload: dict[str, Any],
                    sandbox: Callable[[], SessionSandbox]) -> dict[str, Any]:
        """`payload` with `_rollout.mcp_servers` set, every `http` server listening first."""
        if not servers:
            return payload
        for server in servers:
            await self._check_once(server, sandbox())
        connections = {}
        for server in servers:
            if server.transport == "stdio":
                connections[server.name] = server.connection(python=self.python)
                continue
            port = free_port()
            await _start_http(server, sandbox(), python=self.python, port=port)
            connections[server.name] = server.connection(python=self.python, port=port)
        return {**payload, "_rollout": {**payload["_rollout"], "mcp_servers": connections}}

    async def _check_once(self, server: McpServer, sandbox: SessionSandbox) -> None:
        check = self._checks.get(server)
        if check is None:
            check = self._checks[server] = asyncio.get_running_loop().create_future()
            try:
                check.set_result(await _check(server, sandbox, python=self.python))
            finally:
                if not check.done():  # cancelled mid-check (the session timed out): check again later
                    del self._checks[server]
                    check.set_result(None)
        error = await asyncio.shield(check)
        if error is not None:
            raise AgentFailed(Status.TASK_ERROR, error)


async def _check(server: McpServer, sandbox: SessionSandbox, *, python: str) -> str | None:
    """Why `server` cannot serve this run's sessions, or None."""
    argv = server.argv(python=python, port=0)
    found = await sandbox.exec(["/bin/sh", "-c", _MISSING, "sh", argv[0]], timeout=30)
    assert isinstance(found, ExecResult)
    if found.stdout.strip():
        return (f"MCP server {server.name!r}: its command {argv[0]!r} is not "
                f"{'an executable file' if '/' in argv[0] else 'on the PATH'} inside the session "
                f"(PATH={sandbox.env.get('PATH', '')!r}); fix McpServer(name={server.name!r}, "
                "command=...): install it, give its absolute path, or start a Python server with "
                "('{python}', '{task_dir}/server.py')")
    if server.transport != "stdio":
        return None
    result = await sandbox.exec(argv, env=dict(server.env), stdin=_INITIALIZE.encode(),
                                timeout=server.ready_timeout_s)
    assert isinstance(result, ExecResult)
    if result.stdout.strip() or result.exit_code == 0:
        return None
    if result.timed_out:
        return _failure(server, f"a stdio server: it did not answer MCP initialize within ready_timeout_s="
                                f"{server.ready_timeout_s:g}s (raise it if the server is slow to start)",
                        result, killed=True)
    return _failure(server, "a stdio server: it crashed at start, before answering MCP initialize",
                    result)


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
        where = f"http on the session's 127.0.0.1:{port}: it"
        if exited.done():
            raise AgentFailed(Status.TASK_ERROR, _failure(server, f"{where} exited before listening",
                                                          exited.result()))
        listened = probe.result()
        assert isinstance(listened, ExecResult)
        if not listened.ok:
            raise AgentFailed(Status.TASK_ERROR, _failure(
                server, f"{where} did not listen within ready_timeout_s={server.ready_timeout_s:g}s "
                        "(raise it if the server is slow to start)", await handle.kill(), killed=True))
    finally:
        for task in (probe, exited):
            task.cancel()


def _failure(server: McpServer, what: str, result: ExecResult, *, killed: bool = False) -> str:
    output = (result.stderr.strip() or result.stdout.strip())[-2000:] or "(no output)"
    code = "killed" if killed or result.exit_code is None else f"exit code {result.exit_code}"
    return (f"MCP server {server.name!r} ({' '.join(result.argv)}), {what} ({code}); fix the "
            f"task's McpServer(name={server.name!r}, command=...). Its output:\n{output}")
