"""One local session's record, and the helpers that turn what its agent did into results or
failures (`AgentFailed`, with the tail of its stderr), shared by `local.py`'s session steps."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..records import Status
from ._processes import Child
from ._results import ResultError, parse_invocation_body
from ._session_caps import STDERR_LOG
from ._zygote_pool import read_tail
from .base import AgentRef
from .sandbox import SessionSandbox

STDERR_TAIL_BYTES = 2048


class AgentFailed(Exception):
    """Internal: the session ends as `status` with `error` (agent failure is data)."""

    def __init__(self, status: Status, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


@dataclass
class LocalSession:
    workdir: Path
    session_id: str = ""
    child: Child | None = None
    env: dict[str, str] | None = None
    sandbox: SessionSandbox | None = None
    keep_state: bool = False
    final_state: bytes | None = None
    final_state_error: str | None = None
    network: Any = None  # a network.SessionNetwork when the session's network is isolated
    caps: Any = None  # its _session_caps.SessionBox (cgroup, tmpfs, the cap it broke)
    isolation: Any = None  # its isolation.Isolation: the runtime's, or rooted in its environment

    @property
    def stderr_path(self) -> Path:
        return self.workdir / STDERR_LOG


def resolve_agent(agent: AgentRef) -> tuple[str, str]:
    """The child's `--agent` spec (file paths made absolute) and the directory to import from."""
    if not agent.agent:
        raise AgentFailed(
            Status.AGENT_ERROR,
            f"task {agent.task!r} names no agent; the local runtime needs a file or module:app",
        )
    target, sep, attr = agent.agent.rpartition(":")
    if not (sep and target and attr.isidentifier()):
        target, attr = agent.agent, ""
    if target.endswith(".py") or os.sep in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise AgentFailed(Status.AGENT_ERROR, f"agent file not found: {path}")
        return (f"{path}:{attr}" if attr else str(path)), str(path.parent)
    return agent.agent, os.getcwd()


def loopback_client(address: int | str, timeout: float | None = 5.0) -> httpx.AsyncClient:
    """A plain-HTTP client for the agent's port (or unix socket path): no proxies from the
    environment, and no TLS context (building one loads the CA bundle, ~50 ms of CPU per client)."""
    if isinstance(address, str):
        return httpx.AsyncClient(
            base_url="http://agent", transport=httpx.AsyncHTTPTransport(uds=address, verify=False),
            trust_env=False, timeout=timeout,
        )
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{address}",
        transport=httpx.AsyncHTTPTransport(verify=False),
        trust_env=False,
        timeout=timeout,
    )


def section(stderr_tail: str) -> str:
    if not stderr_tail:
        return ""
    return f"\n--- agent stderr (last {STDERR_TAIL_BYTES} bytes) ---\n{stderr_tail}"


def stderr_section(session: LocalSession) -> str:
    return section(read_tail(session.stderr_path, STDERR_TAIL_BYTES))


def error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:STDERR_TAIL_BYTES]
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return json.dumps(body)[:STDERR_TAIL_BYTES]


async def read_body(response: httpx.Response, max_bytes: int | None) -> bytes:
    """A streamed response's body, refused past `max_bytes` (runtime.limits.session_result_mb)."""
    if max_bytes is None:
        return await response.aread()
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise AgentFailed(Status.AGENT_ERROR, (
                f"resource_exceeded: session_result_mb={max_bytes // (1024 * 1024)} exceeded: the "
                f"agent's answer passed {max_bytes} bytes (read no further); return less, or raise "
                "runtime.limits.session_result_mb"))
    return bytes(body)


def parse_result(response: httpx.Response, session: LocalSession,
                 body: bytes | None = None) -> dict[str, Any]:
    try:
        return parse_invocation_body(response.content if body is None else body,
                                     response.headers.get("content-type", ""))
    except ResultError as exc:
        suffix = stderr_section(session) if exc.streamed_error else ""
        raise AgentFailed(Status.AGENT_ERROR, f"{exc}{suffix}") from None


def session_environment(home: Path, import_roots: list[str], *, passthrough: tuple[str, ...],
                        extra: dict[str, str]) -> dict[str, str]:
    """The scrubbed environment of a session process living in `home` (its HOME; TMPDIR inside):
    `import_roots` (the agent's folder, the harness source) first on PYTHONPATH, then the
    harness's own PYTHONPATH; `extra` (the S3 stand-in's settings), `passthrough` names."""
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    roots = [*import_roots, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(roots)),
        "HF_HUB_OFFLINE": "1",
    }
    if "LC_ALL" in os.environ:
        env["LC_ALL"] = os.environ["LC_ALL"]
    env.update(extra)
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    return env
