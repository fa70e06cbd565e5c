"""MCP tool servers a task starts per agent session (`@arl.task(mcp_servers=[...])`).

A server is a command. `stdio`: the agent's own MCP client starts it (as its child, so inside
the session's sandbox, and it dies with the session); the harness only tells the agent how.
`http` (streamable HTTP): the runtime starts it inside the session's sandbox before the agent is
invoked, on a port of the session's own loopback, waits until it listens, and kills it with the
session. Either way the agent finds the connections in `payload["_rollout"]["mcp_servers"]`,
name -> the dict that langchain-mcp-adapters' `MultiServerMCPClient` takes as it is:
`{"transport": "stdio", "command": ..., "args": [...]}` or
`{"transport": "streamable_http", "url": "http://127.0.0.1:PORT/mcp"}`.

Placeholders in `command`: `{python}` (the interpreter that runs agent sessions), `{task_dir}`
(the folder of the task file, filled in by `@arl.task`), and for `http` `{port}` (required: the
port the runtime chose).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

MCP_TRANSPORTS = ("stdio", "http")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class McpServer:
    """One MCP server of a task: `name` (the key the agent finds it under), `command` (argv),
    `transport` (`stdio` or `http`), `path` (the URL path of an `http` server), `env` (added to
    the session's environment), `ready_timeout_s` (how long an `http` server may take to listen)."""

    name: str
    command: tuple[str, ...]
    transport: str = "stdio"
    path: str = "/mcp"
    env: tuple[tuple[str, str], ...] = field(default=())
    ready_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        where = f"McpServer(name={self.name!r})"
        if isinstance(self.command, str):
            raise ValueError(f"{where}: command={self.command!r} is one string; give the argv as a list, "
                             f"e.g. {self.command.split() or ['{python}', 'server.py']!r}")
        object.__setattr__(self, "command", tuple(self.command))
        env = self.env.items() if isinstance(self.env, dict) else self.env
        object.__setattr__(self, "env", tuple((str(k), str(v)) for k, v in env))
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"{where}: name must be 1-64 letters, digits, '_' or '-' starting with a "
                             "letter (the key the agent finds the server under), e.g. name='notes'")
        if self.transport not in MCP_TRANSPORTS:
            raise ValueError(f"{where}: transport={self.transport!r} is not supported; valid: {list(MCP_TRANSPORTS)}")
        if not self.command or not all(isinstance(part, str) and part for part in self.command):
            raise ValueError(f"{where}: command must be a non-empty argv of non-empty strings, got "
                             f"{self.command!r}; e.g. command=['{{python}}', '{{task_dir}}/server.py']")
        has_port = any("{port}" in part for part in self.command)
        if self.transport == "http" and not has_port:
            raise ValueError(f"{where}: an http server's command must take the port the runtime "
                             f"chooses: put '{{port}}' in it, e.g. ('{{python}}', 'server.py', '--port', '{{port}}')")
        if self.transport == "stdio" and has_port:
            raise ValueError(f"{where}: a stdio server has no port; remove '{{port}}' or use transport='http'")
        if not self.path.startswith("/"):
            raise ValueError(f"{where}: path={self.path!r} must start with '/'")
        if self.ready_timeout_s <= 0:
            raise ValueError(f"{where}: ready_timeout_s={self.ready_timeout_s!r} must be a number of seconds > 0")

    def in_task(self, task_dir: Path) -> McpServer:
        """This server with `{task_dir}` filled in (what `@arl.task` stores)."""
        return replace(self, command=tuple(part.replace("{task_dir}", str(task_dir)) for part in self.command))

    def argv(self, *, python: str = sys.executable, port: int | None = None) -> list[str]:
        """The command to run, placeholders filled in."""
        filled = [part.replace("{python}", python) for part in self.command]
        if port is not None:
            filled = [part.replace("{port}", str(port)) for part in filled]
        return filled

    def connection(self, *, python: str = sys.executable, port: int | None = None,
                   host: str = "127.0.0.1") -> dict[str, Any]:
        """What the agent gets under `_rollout.mcp_servers[name]` (langchain-mcp-adapters' shape)."""
        if self.transport == "http":
            if port is None:
                raise ValueError(f"McpServer {self.name!r}: an http server's connection needs its port")
            return {"transport": "streamable_http", "url": f"http://{host}:{port}{self.path}"}
        argv = self.argv(python=python)
        return {"transport": "stdio", "command": argv[0], "args": argv[1:], "env": dict(self.env) or None}


def check_unique(servers: tuple[McpServer, ...], *, task: str) -> None:
    """Every entry an `McpServer`, no name twice (a mistake in `@task(mcp_servers=...)`)."""
    wrong = [server for server in servers if not isinstance(server, McpServer)]
    if wrong:
        raise TypeError(f"@task {task}: mcp_servers takes arl.McpServer(...) entries, got {wrong[0]!r}")
    names = [server.name for server in servers]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"@task {task}: mcp_servers names must be unique, {duplicates} repeat")


def stdio_only(servers: tuple[McpServer, ...], *, python: str = "python") -> dict[str, Any]:
    """`{"mcp_servers": ...}` for a runtime that cannot start servers itself (AgentCore: the
    agent's client starts stdio ones in the microVM; the image must hold their commands)."""
    http = [server.name for server in servers if server.transport == "http"]
    if http:
        raise ValueError(f"MCP servers {http} are transport='http', which only runtime=local starts "
                         "(in the session's sandbox); on this runtime use transport='stdio' (the agent's "
                         "MCP client starts the command inside its session; the image must hold it)")
    return {"mcp_servers": {s.name: s.connection(python=python) for s in servers}} if servers else {}
