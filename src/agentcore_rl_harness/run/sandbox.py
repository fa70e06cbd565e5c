"""`arl.Sandbox`: the shell and files of one agent session, for tasks, rewards and agents.

One face over three backends: a live local session (commands join its bubblewrap namespaces,
`runtimes/sandbox.py`), an AgentCore Runtime session (`InvokeAgentRuntimeCommand`,
`runtimes/_acr_commands.py`), and `Sandbox.here()` for an agent's own process (it already runs
inside its sandbox, locally or in its microVM). The async methods are the core; `sandbox.sync`
is the same object for sync code, bridged through the harness's loop (or a private one).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import SandboxError
from ..records import SessionOutcome
from ..runtimes.isolation import NoIsolation, SandboxLimits
from ..runtimes.sandbox import ExecResult, SessionSandbox
from .loop import LoopThread

__all__ = ["ExecResult", "FinalSandbox", "Sandbox", "SyncSandbox", "keeps_final_state"]


class SandboxBackend(Protocol):
    """What a session's sandbox offers; `runtimes` ship one per runtime."""

    session_id: str

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, timeout: float | None = 60.0,
                   background: bool = False, stdin: bytes | None = None) -> Any: ...

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None: ...

    async def get_file(self, path: str, *, max_bytes: int = ...) -> bytes: ...


def keeps_final_state(runtime: Any) -> bool:
    """Whether `runtime.run_session` can return a session's final files (`keep_state=`)."""
    run_session = getattr(runtime, "run_session", None)
    return run_session is not None and "keep_state" in inspect.signature(run_session).parameters \
        and hasattr(runtime, "restore")


class FinalSandbox:
    """A finished session's files, opened again (lazily, isolated like the session) for the task
    to inspect; closed when its rollout is scored."""

    def __init__(self, runtime: Any, outcome: SessionOutcome, *, session_id: str) -> None:
        self.session_id = session_id
        self._runtime = runtime
        self._state = outcome.final_state
        self._why_missing = outcome.final_state_error
        self._stack: contextlib.AsyncExitStack | None = None
        self._live: Any = None
        self._opening = asyncio.Lock()

    async def _backend(self) -> Any:
        async with self._opening:
            if self._live is None:
                if self._state is None:
                    raise SandboxError(self._missing())
                self._stack = contextlib.AsyncExitStack()
                self._live = await self._stack.enter_async_context(
                    self._runtime.restore(self._state, session_id=self.session_id))
            return self._live

    @property
    def state(self) -> bytes | None:
        """The session's final files (gzip tar), or None."""
        return self._state

    @property
    def why_missing(self) -> str | None:
        return None if self._state is not None else self._missing()

    def _missing(self) -> str:
        if not keeps_final_state(self._runtime):
            return (f"session {self.session_id}: the {type(self._runtime).__name__} keeps no final "
                    "files for the sandbox fixture yet; use runtime=local")
        return (f"session {self.session_id} kept no final files: "
                f"{self._why_missing or 'the session ended before it started'}")

    async def exec(self, argv: Sequence[str], **kwargs: Any) -> Any:
        return await (await self._backend()).exec(argv, **kwargs)

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        await (await self._backend()).put_file(path, data, mode=mode)

    async def get_file(self, path: str, **kwargs: Any) -> bytes:
        return await (await self._backend()).get_file(path, **kwargs)

    async def aclose(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._live = self._stack, None, None
            await stack.aclose()


class Sandbox:
    """Commands and files of one session. `await sandbox.exec([...])`, or `sandbox.sync.exec`."""

    def __init__(self, backend: SandboxBackend, *, loop: LoopThread | None = None) -> None:
        self.backend = backend
        self._loop = loop

    @classmethod
    def here(cls, *, workdir: str | None = None, limits: SandboxLimits | None = None) -> Sandbox:
        """The calling process's own environment: what an agent uses for its shell tools."""
        backend = SessionSandbox(
            session_id=os.environ.get("AGENTCORE_RUNTIME_SESSION_ID", "here"),
            isolation=NoIsolation(limits or SandboxLimits(memory_mb=None, file_size_mb=None,
                                                          open_files=None, processes=None)),
            host_pid=os.getpid(), workdir=workdir or os.getcwd(), env=os.environ,
        )
        return cls(backend)

    @property
    def session_id(self) -> str:
        return self.backend.session_id

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, timeout: float | None = 60.0,
                   background: bool = False, stdin: bytes | None = None) -> Any:
        """Run `argv` (a list, never a shell string) in the session: an `ExecResult`, or a
        background handle (`status()`, `result(timeout)`, `kill()`) with `background=True`."""
        return await self.backend.exec(argv, cwd=cwd, env=env, timeout=timeout,
                                       background=background, stdin=stdin)

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        await self.backend.put_file(path, data, mode=mode)

    async def get_file(self, path: str, **kwargs: Any) -> bytes:
        return await self.backend.get_file(path, **kwargs)

    @property
    def sync(self) -> SyncSandbox:
        """The same sandbox with blocking methods (for sync tests, rewards and agent tools)."""
        if self._loop is None:
            self._loop = LoopThread(name="agentcore-rl-sandbox")
        return SyncSandbox(self, self._loop)


class SyncSandbox:
    """Blocking calls over a `Sandbox`; background handles come back blocking too."""

    def __init__(self, sandbox: Sandbox, loop: LoopThread) -> None:
        self._sandbox = sandbox
        self._loop = loop

    def _run(self, coro: Any) -> Any:
        return self._loop.block_on(coro, refusal=(
            "sandbox.sync called on the harness's own event loop (an async test or reward): "
            "await the sandbox's async methods instead"))

    def exec(self, argv: Sequence[str], **kwargs: Any) -> Any:
        result = self._run(self._sandbox.exec(argv, **kwargs))
        return result if isinstance(result, ExecResult) else SyncBackground(result, self)

    def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        self._run(self._sandbox.put_file(path, data, mode=mode))

    def get_file(self, path: str, **kwargs: Any) -> bytes:
        return self._run(self._sandbox.get_file(path, **kwargs))


class SyncBackground:
    """A background command seen from sync code."""

    def __init__(self, handle: Any, sync: SyncSandbox) -> None:
        self._handle = handle
        self._sync = sync
        self.pid = getattr(handle, "pid", None)

    @property
    def running(self) -> bool:
        return self._handle.running

    def status(self) -> str:
        return self._handle.status()

    def result(self, timeout: float | None = None) -> ExecResult:
        return self._sync._run(self._handle.result(timeout))

    def kill(self) -> ExecResult:
        return self._sync._run(self._handle.kill())
