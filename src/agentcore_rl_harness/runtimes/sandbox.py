"""Shell and files inside a live local session (`arl.Sandbox`'s local backend).

Every command runs inside the session's own isolation (joined with nsenter under bubblewrap, as
the session's uid under uid isolation), never as the harness: a path or a symlink the agent left
behind resolves in the session's own view, so file access cannot escape it. Output is capped
(`ExecResult.stdout_truncated` says when), a command past its timeout is killed with its process
group, and background processes are killed when the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import SandboxError
from .isolation import Isolation

DEFAULT_OUTPUT_CAP = 256 * 1024  # bytes per stream, as AgentCore's InvokeAgentRuntimeCommand
DEFAULT_FILE_CAP = 64 * 1024 * 1024
_READ_CHUNK = 65536


@dataclass(frozen=True)
class ExecResult:
    """How one command ended: exit code (None if killed by the timeout), its capped output."""

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    elapsed_s: float = 0.0
    stdout_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class _CappedReader:
    """Keeps the first `cap` bytes of a stream and drains the rest (a chatty command never blocks)."""

    def __init__(self, stream: asyncio.StreamReader | None, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.kept = bytearray()
        self.truncated = False

    async def run(self) -> None:
        if self.stream is None:
            return
        while chunk := await self.stream.read(_READ_CHUNK):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if len(chunk) > max(room, 0):
                self.truncated = True


class BackgroundHandle:
    """What every backend's background command offers over the task that collects its result
    (`_task`): poll it, wait for it; subclasses add `kill`."""

    _task: asyncio.Future[ExecResult]

    @property
    def running(self) -> bool:
        return not self._task.done()

    def status(self) -> str:
        """`running`, or `exited` once its result is ready."""
        return "running" if self.running else "exited"

    async def result(self, timeout: float | None = None) -> ExecResult:
        """Wait (at most `timeout` s; TimeoutError past it) for the command to end."""
        async with asyncio.timeout(timeout):
            return await asyncio.shield(self._task)


class BackgroundProcess(BackgroundHandle):
    """A command started with `background=True`: poll it, wait for it, or kill it."""

    def __init__(self, process: asyncio.subprocess.Process, argv: tuple[str, ...], cap: int,
                 timeout: float | None) -> None:
        self.process = process
        self.argv = argv
        self.pid = process.pid
        self._started = time.monotonic()
        self._task = asyncio.ensure_future(_collect(process, argv, cap, timeout, self._started))

    async def kill(self) -> ExecResult:
        """Kill its process group and return what it wrote."""
        _kill_group(self.process.pid)
        return await self._task


async def _collect(process: asyncio.subprocess.Process, argv: tuple[str, ...], cap: int,
                   timeout: float | None, started: float) -> ExecResult:
    out, err = _CappedReader(process.stdout, cap), _CappedReader(process.stderr, cap)
    readers = asyncio.gather(out.run(), err.run())
    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await process.wait()
    except TimeoutError:
        timed_out = True
        _kill_group(process.pid)
        await process.wait()
    except asyncio.CancelledError:
        _kill_group(process.pid)
        readers.cancel()
        raise
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(2.0):  # grandchildren holding the pipes open are killed above
            await readers
    stdout = bytes(out.kept)
    return ExecResult(
        argv=argv, exit_code=None if timed_out else process.returncode,
        stdout=stdout.decode(errors="replace"), stderr=bytes(err.kept).decode(errors="replace"),
        timed_out=timed_out, stdout_truncated=out.truncated, stderr_truncated=err.truncated,
        elapsed_s=time.monotonic() - started, stdout_bytes=stdout,
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class SessionSandbox:
    """Commands and files inside one live local session (see the module docstring)."""

    def __init__(self, *, session_id: str, isolation: Isolation, host_pid: int, workdir: str,
                 env: Mapping[str, str], output_cap: int = DEFAULT_OUTPUT_CAP,
                 join: Sequence[str] = ()) -> None:
        """`join`: a prefix that puts each command into the session's cgroup (its caps)."""
        self.session_id = session_id
        self.join = tuple(join)
        self.isolation = isolation
        self.host_pid = host_pid
        self.workdir = workdir
        self.env = dict(env)
        self.output_cap = output_cap
        self._background: set[BackgroundProcess] = set()
        self._closed = False

    async def exec(
        self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = 60.0, background: bool = False, stdin: bytes | None = None,
    ) -> ExecResult | BackgroundProcess:
        """Run `argv` in the session; relative `cwd` is under the session's directory."""
        process, argv_tuple = await self._start(argv, cwd=cwd, env=env, stdin=stdin)
        if background:
            handle = BackgroundProcess(process, argv_tuple, self.output_cap, timeout)
            self._background.add(handle)
            return handle
        return await _collect(process, argv_tuple, self.output_cap, timeout, time.monotonic())

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Write `data` to `path` in the session (parents created), as the session's own user."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'
        result = await self.exec(["/bin/sh", "-c", script, "sh", path, f"{mode:o}"],
                                 stdin=payload, timeout=60.0)
        assert isinstance(result, ExecResult)
        if not result.ok:
            raise SandboxError(f"cannot write {path!r} in session {self.session_id}: "
                               f"{result.stderr.strip() or f'exit code {result.exit_code}'}")

    async def get_file(self, path: str, *, max_bytes: int = DEFAULT_FILE_CAP) -> bytes:
        """The bytes of `path` in the session (SandboxError if missing or over `max_bytes`)."""
        process, argv = await self._start(["/bin/cat", "--", path], cwd=None, env=None, stdin=None)
        result = await _collect(process, argv, max_bytes, 60.0, time.monotonic())
        if not result.ok:
            raise SandboxError(f"cannot read {path!r} in session {self.session_id}: "
                               f"{result.stderr.strip() or f'exit code {result.exit_code}'}")
        if result.stdout_truncated:
            raise SandboxError(f"{path!r} in session {self.session_id} is larger than "
                               f"max_bytes={max_bytes}; pass a larger max_bytes")
        return result.stdout_bytes

    async def aclose(self) -> None:
        """Kill every background process still running (the session is ending)."""
        self._closed = True
        for handle in list(self._background):
            if handle.running:
                await handle.kill()
        self._background.clear()

    async def _start(self, argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str] | None,
                     stdin: bytes | None) -> tuple[asyncio.subprocess.Process, tuple[str, ...]]:
        if self._closed:
            raise SandboxError(f"session {self.session_id} has ended; its sandbox is gone")
        argv_tuple = tuple(str(a) for a in argv)
        if not argv_tuple:
            raise SandboxError("exec needs a non-empty argv, e.g. ['ls', '-l']")
        directory = str(PurePosixPath(self.workdir) / cwd) if cwd else self.workdir
        plan = self.isolation.enter(argv_tuple, host_pid=self.host_pid, cwd=directory)
        process = await asyncio.create_subprocess_exec(
            *self.join, *plan.argv, env={**self.env, **(env or {})},
            cwd=None if self.isolation.namespaced else directory,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            **plan.popen_kwargs(),
        )
        if stdin is not None:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.close()
        return process, argv_tuple
