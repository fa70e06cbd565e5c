"""`arl.Sandbox`: the shell and files of one agent session, for tasks, rewards and agents.

One face over three backends: a live local session (commands join its bubblewrap namespaces,
`runtimes/sandbox.py`), an AgentCore Runtime session (`InvokeAgentRuntimeCommand`,
`runtimes/_acr_commands.py`), and `Sandbox.here()` for an agent's own process (it already runs
inside its sandbox, locally or in its microVM). `FinalSandbox` is a finished session as its task
sees it (`rollout.sandbox`, the `sandbox` fixture): what the runtime kept (`KeptSession`),
released once the rollout is scored. The async methods are the core; `sandbox.sync`
is the same object for sync code, bridged through the harness's loop (or a private one).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import SandboxError
from ..records import SessionOutcome
from ..runtimes.base import AgentRuntime, KeptSession
from ..runtimes.isolation import NoIsolation, SandboxLimits
from ..runtimes.sandbox import ExecResult, SessionSandbox
from .loop import LoopThread

__all__ = ["ExecResult", "FinalSandbox", "KeptSession", "Sandbox", "SyncSandbox"]


class SandboxBackend(Protocol):
    """What a session's sandbox offers; `runtimes` ship one per runtime."""

    session_id: str

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, timeout: float | None = 60.0,
                   background: bool = False, stdin: bytes | None = None) -> Any: ...

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None: ...

    async def get_file(self, path: str, *, max_bytes: int = ...) -> bytes: ...


class FinalSandbox:
    """A finished session as its task inspects it: what the runtime kept, opened on first use,
    released (`aclose`, whether opened or not) once its rollout is scored."""

    def __init__(self, runtime: AgentRuntime, outcome: SessionOutcome, *, session_id: str) -> None:
        self.session_id = session_id
        self._runtime_name = type(runtime).__name__
        self._kept: KeptSession | None = runtime.kept(outcome, session_id=session_id)
        self._was_kept = self._kept is not None
        self._state: bytes | None = outcome.final_state
        self._why_missing: str | None = outcome.final_state_error or (
            "an AgentCore Runtime session is inspected live; its files are not copied out"
            if self._kept is not None and self._kept.live and outcome.final_state is None else None)
        self._live: Any = None
        self._opening = asyncio.Lock()

    async def _backend(self) -> Any:
        async with self._opening:
            if self._live is None:
                if self._kept is None:
                    raise SandboxError(
                        f"session {self.session_id}: the {self._runtime_name} keeps no session "
                        "for the sandbox fixture; use runtime=local or runtime=agentcore")
                self._live = await self._kept.open()
            return self._live

    @property
    def state(self) -> bytes | None:
        """The session's final files (gzip tar) where the runtime kept them as files, or None
        (saved in the run directory for `agentcore-rl rescore`)."""
        return self._state

    @property
    def why_missing(self) -> str | None:
        """Why `state` is None (None when it is not)."""
        if self._state is not None:
            return None
        if self._kept is None and not self._was_kept:
            return (f"session {self.session_id}: the {self._runtime_name} keeps no final files; "
                    "use runtime=local")
        return (f"session {self.session_id} kept no final files: "
                f"{self._why_missing or 'the session ended before it started'}")

    async def exec(self, argv: Sequence[str], **kwargs: Any) -> Any:
        return await (await self._backend()).exec(argv, **kwargs)

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        await (await self._backend()).put_file(path, data, mode=mode)

    async def get_file(self, path: str, **kwargs: Any) -> bytes:
        return await (await self._backend()).get_file(path, **kwargs)

    async def aclose(self) -> None:
        kept, self._kept, self._live = self._kept, None, None
        if kept is not None:
            await kept.aclose()


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
