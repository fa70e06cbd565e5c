"""The `local` runtime: one isolated OS process per agent session, speaking the ACR HTTP contract.

Each session gets a fresh temporary working directory (also its HOME and TMPDIR), a scrubbed
environment, and its own process group; the child (`_agent_server.py`) serves the agent's
BedrockAgentCoreApp on a loopback port. Whatever happens - success, agent crash, timeout,
cancellation - the whole process group is killed and the directory removed.

Results: a JSON body is the result (a non-dict value becomes `{"output": value}`). A streaming
body (`data: <json>` lines, what BedrockAgentCoreApp sends for generator handlers) yields its
last event as the result, the other events are dropped; a final streamed error event is an
agent_error. The session timeout counts from the moment the session gets a concurrency slot
and covers process start, readiness and the invocation; time spent waiting for a slot does not
count (and is not in `elapsed_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..errors import RuntimeStartError
from ..records import SessionOutcome, Status
from .base import AgentRef

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
_SERVER_SCRIPT = Path(__file__).with_name("_agent_server.py")
_HARNESS_SRC = Path(__file__).resolve().parents[2]
_STDERR_TAIL_BYTES = 2048
_EXIT_WAIT_S = 1.0
_STREAM_ERROR_MESSAGE = "An error occurred during streaming"


class _AgentFailed(Exception):
    """Internal: the session ends as `status` with `error` (agent failure is data)."""

    def __init__(self, status: Status, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


@dataclass
class _Session:
    workdir: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "agent-stderr.log"


class LocalRuntime:
    """Runs each agent session in its own process; implements `AgentRuntime`."""

    def __init__(
        self,
        *,
        concurrency: int = 8,
        startup_timeout_s: float = 60.0,
        python: str = sys.executable,
        env_passthrough: tuple[str, ...] | list[str] = (),
        base_dir: str | os.PathLike[str] | None = None,
        kill_grace_s: float = 2.0,
    ) -> None:
        """`base_dir` is where session directories are created (default: the system temp dir)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.startup_timeout_s = startup_timeout_s
        self.python = python
        self.env_passthrough = tuple(env_passthrough)
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.kill_grace_s = kill_grace_s
        self._slots = asyncio.Semaphore(concurrency)
        self._live: set[asyncio.subprocess.Process] = set()
        self._closed = False

    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float
    ) -> SessionOutcome:
        async with self._slots:
            if self._closed:
                raise RuntimeStartError("LocalRuntime is closed; create a new one to run sessions")
            started = time.monotonic()
            try:
                result = await self._run(agent, session_id, payload, timeout_s)
            except _AgentFailed as failure:
                return SessionOutcome(
                    status=failure.status,
                    result=None,
                    error=failure.error,
                    elapsed_s=time.monotonic() - started,
                )
            return SessionOutcome(
                status=Status.COMPLETED,
                result=result,
                error=None,
                elapsed_s=time.monotonic() - started,
            )

    async def aclose(self) -> None:
        """Kill every live session process; later `run_session` calls raise."""
        self._closed = True
        await asyncio.gather(*(self._terminate(p) for p in list(self._live)))

    @property
    def live_sessions(self) -> int:
        return len(self._live)

    # -- one session ------------------------------------------------------------------------

    async def _run(
        self, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        spec, import_root = _resolve_agent(agent)
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        session = _Session(Path(tempfile.mkdtemp(prefix="arl-session-", dir=self.base_dir)))
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    port = await self._start(session, spec, import_root)
                    return await self._invoke(session, port, session_id, payload)
            except TimeoutError:
                raise _AgentFailed(
                    Status.TIMEOUT,
                    f"agent {spec} did not answer within {timeout_s:g}s (session {session_id})",
                ) from None
        finally:
            await self._cleanup(session)

    def _environment(self, session: _Session, import_root: str) -> dict[str, str]:
        tmp = session.workdir / "tmp"
        tmp.mkdir()
        import_roots = [import_root, str(_HARNESS_SRC)]
        import_roots.extend(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(session.workdir),
            "TMPDIR": str(tmp),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(import_roots)),
            "HF_HUB_OFFLINE": "1",
        }
        if "LC_ALL" in os.environ:
            env["LC_ALL"] = os.environ["LC_ALL"]
        for name in self.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    async def _start(self, session: _Session, spec: str, import_root: str) -> int:
        env = self._environment(session, import_root)
        with open(session.stderr_path, "wb") as stderr_file:
            try:
                session.process = await asyncio.create_subprocess_exec(
                    self.python,
                    "-u",
                    str(_SERVER_SCRIPT),
                    "--agent",
                    spec,
                    "--parent-pid",
                    str(os.getpid()),
                    cwd=session.workdir,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr_file,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RuntimeStartError(
                    f"cannot start the agent process with python {self.python!r}: {exc}; "
                    "set the local runtime's `python` to a working interpreter"
                ) from exc
        process = session.process
        self._live.add(process)

        try:
            async with asyncio.timeout(self.startup_timeout_s):
                port = await self._read_port(session, spec)
                await self._wait_healthy(session, port, spec)
        except TimeoutError:
            raise _AgentFailed(
                Status.TIMEOUT,
                f"agent {spec} did not become ready within startup_timeout_s="
                f"{self.startup_timeout_s:g}s" + _stderr_section(session),
            ) from None
        return port

    async def _read_port(self, session: _Session, spec: str) -> int:
        process = session.process
        assert process is not None and process.stdout is not None
        line = await process.stdout.readline()
        if not line:
            raise await self._exited(session, f"agent {spec} exited before it was ready")
        try:
            ready = json.loads(line)
        except json.JSONDecodeError:
            raise await self._exited(
                session, f"agent {spec} wrote an unexpected ready line {line[:200]!r}"
            ) from None
        if "error" in ready:
            raise _AgentFailed(Status.AGENT_ERROR, f"cannot load the agent: {ready['error']}")
        return int(ready["port"])

    async def _wait_healthy(self, session: _Session, port: int, spec: str) -> None:
        assert session.process is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            while True:
                if session.process.returncode is not None:
                    raise await self._exited(session, f"agent {spec} exited before it was ready")
                try:
                    response = await client.get("/ping")
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not accepting yet; the loop checks whether the process died
                await asyncio.sleep(0.02)

    async def _invoke(
        self, session: _Session, port: int, session_id: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        timeout = httpx.Timeout(None)  # the session deadline (asyncio.timeout_at) governs
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as c:
            try:
                response = await c.post(
                    "/invocations", json=payload, headers={SESSION_HEADER: session_id}
                )
            except httpx.TransportError as exc:
                raise await self._exited(
                    session, f"agent dropped the connection while answering ({exc!r})"
                ) from None
        if not 200 <= response.status_code < 300:
            raise _AgentFailed(
                Status.AGENT_ERROR,
                f"agent returned HTTP {response.status_code}: {_error_text(response)}"
                + _stderr_section(session),
            )
        return _parse_result(response, session)

    async def _exited(self, session: _Session, what: str) -> _AgentFailed:
        """The failure for a child that is gone (or going): exit code plus the stderr tail."""
        process = session.process
        assert process is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_WAIT_S):
                await process.wait()
        code = process.returncode
        state = f"exit code {code}" if code is not None else "process still running"
        return _AgentFailed(Status.AGENT_ERROR, f"{what}; {state}" + _stderr_section(session))

    # -- cleanup ------------------------------------------------------------------------------

    async def _cleanup(self, session: _Session) -> None:
        try:
            if session.process is not None:
                try:
                    await self._terminate(session.process)
                except asyncio.CancelledError:
                    _killpg(session.process.pid, signal.SIGKILL)
                    raise
        finally:
            shutil.rmtree(session.workdir, onerror=_log_rmtree_error)

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM the session's process group, SIGKILL it after the grace period."""
        try:
            _killpg(process.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(self.kill_grace_s):
                    await process.wait()
            except TimeoutError:
                logger.warning("agent pid %d ignored SIGTERM; killing it", process.pid)
            _killpg(process.pid, signal.SIGKILL)  # also reaps grandchildren left in the group
            await process.wait()
        finally:
            self._live.discard(process)


def _resolve_agent(agent: AgentRef) -> tuple[str, str]:
    """The child's `--agent` spec (file paths made absolute) and the directory to import from."""
    if not agent.agent:
        raise _AgentFailed(
            Status.AGENT_ERROR,
            f"task {agent.task!r} names no agent; the local runtime needs a file or module:app",
        )
    target, sep, attr = agent.agent.rpartition(":")
    if not (sep and target and attr.isidentifier()):
        target, attr = agent.agent, ""
    if target.endswith(".py") or os.sep in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise _AgentFailed(Status.AGENT_ERROR, f"agent file not found: {path}")
        return (f"{path}:{attr}" if attr else str(path)), str(path.parent)
    return agent.agent, os.getcwd()


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _log_rmtree_error(function: Any, path: str, exc_info: Any) -> None:
    logger.warning("could not remove session file %s: %s", path, exc_info[1])


def _stderr_tail(session: _Session) -> str:
    try:
        with open(session.stderr_path, "rb") as stderr_file:
            stderr_file.seek(0, os.SEEK_END)
            size = stderr_file.tell()
            stderr_file.seek(max(0, size - _STDERR_TAIL_BYTES))
            return stderr_file.read().decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return ""


def _stderr_section(session: _Session) -> str:
    tail = _stderr_tail(session)
    return f"\n--- agent stderr (last {_STDERR_TAIL_BYTES} bytes) ---\n{tail}" if tail else ""


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:_STDERR_TAIL_BYTES]
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return json.dumps(body)[:_STDERR_TAIL_BYTES]


def _as_result(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"output": value}


def _parse_result(response: httpx.Response, session: _Session) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        events = []
        for line in response.text.splitlines():
            if line.startswith("data:"):
                try:
                    events.append(json.loads(line[5:].strip()))
                except json.JSONDecodeError:
                    raise _AgentFailed(
                        Status.AGENT_ERROR,
                        f"agent streamed an event that is not JSON: {line[:200]!r}",
                    ) from None
        if not events:
            raise _AgentFailed(Status.AGENT_ERROR, "agent streamed no `data:` events")
        last = events[-1]
        if isinstance(last, dict) and last.get("message") == _STREAM_ERROR_MESSAGE:
            raise _AgentFailed(
                Status.AGENT_ERROR,
                f"agent raised while streaming: {last.get('error_type')}: {last.get('error')}"
                + _stderr_section(session),
            )
        return _as_result(last)
    try:
        return _as_result(response.json())
    except ValueError:
        raise _AgentFailed(
            Status.AGENT_ERROR,
            f"agent answered {response.status_code} with a body that is neither JSON nor a "
            f"`data:` stream: {response.text[:200]!r}",
        ) from None
