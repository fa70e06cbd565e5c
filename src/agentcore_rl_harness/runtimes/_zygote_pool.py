"""Harness side of the `local` runtime's `fork` start method: one zygote per agent, a fork per session.

A zygote (`_zygote.py`) is started lazily by the first session of an agent spec, in its own
private temp directory with the same scrubbed environment a session gets, and lives until
`aclose()` or until it dies (the next session then starts a new one). A zygote that cannot load
its agent fails every session waiting for it; the next session tries again, so a transient
problem is not permanent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RuntimeStartError
from ..records import Status

logger = logging.getLogger(__name__)

_ZYGOTE_SCRIPT = Path(__file__).with_name("_zygote.py")
_ZygoteKey = tuple[str, str]  # (agent spec, import root)


class ZygoteFailed(Exception):
    """The zygote could not start: every session waiting for it ends as `status`."""

    def __init__(self, status: Status, error: str, stderr_tail: str = "") -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.stderr_tail = stderr_tail


class ForkedChild:
    """A session process forked by a zygote, seen through its connection to that zygote."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self._reader = reader
        self._writer = writer
        self._ready: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._exited = asyncio.Event()
        self._pump_task = asyncio.create_task(self._pump())

    async def read_ready(self) -> bytes:
        """The child's ready line, or b"" if it exited (or its zygote vanished) first."""
        return await self._ready

    async def wait(self) -> int | None:
        """Wait until the zygote reports the exit; None if the zygote went away instead."""
        await self._exited.wait()
        return self.returncode

    def exit_state(self) -> str:
        if self.returncode is not None:
            return f"exit code {self.returncode}"
        if self._exited.is_set():
            return "exit code unknown (its zygote process is gone)"
        return "process still running"

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the child's process group (which outlives it while its own children run)."""
        if self.pid is not None:
            _signal_group(self.pid, sig)

    def close(self) -> None:
        """Drop the connection; a child still running is SIGKILLed by its zygote."""
        self._writer.close()
        self._pump_task.cancel()

    async def _pump(self) -> None:
        try:
            while line := await self._reader.readline():
                message = json.loads(line)
                if "exit" in message:
                    self.returncode = int(message["exit"])
                    continue
                self.pid = int(message["pid"])
                if "port" in message and not self._ready.done():
                    self._ready.set_result(line)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("lost the zygote connection of agent pid %s: %r", self.pid, exc)
        finally:
            if not self._ready.done():
                self._ready.set_result(b"")
            self._exited.set()


@dataclass(eq=False)
class _Zygote:
    process: asyncio.subprocess.Process
    directory: Path
    socket_path: Path

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def fork(self, *, workdir: Path, env: dict[str, str]) -> ForkedChild:
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path))
        try:
            writer.write(json.dumps({"workdir": str(workdir), "env": env}).encode() + b"\n")
            await writer.drain()
        except BaseException:
            writer.close()
            raise
        return ForkedChild(reader, writer)

    async def stop(self, grace_s: float) -> None:
        """Close its stdin (it kills its children and exits); SIGKILL it after `grace_s`."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                async with asyncio.timeout(grace_s):
                    await self.process.wait()
            except TimeoutError:
                logger.warning("zygote pid %d did not exit; killing it", self.process.pid)
            _signal_group(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class ZygotePool:
    """Zygotes by agent spec: started on first use, restarted after they die or fail to start."""

    def __init__(
        self,
        *,
        python: str,
        startup_timeout_s: float,
        kill_grace_s: float,
        environment: Callable[[Path, str], dict[str, str]],
    ) -> None:
        """`environment(directory, import_root)` is the scrubbed environment for a process."""
        self.python = python
        self.startup_timeout_s = startup_timeout_s
        self.kill_grace_s = kill_grace_s
        self.environment = environment
        self._starting: dict[_ZygoteKey, asyncio.Task[_Zygote]] = {}
        self._zygotes: set[_Zygote] = set()
        self._closed = False

    async def fork(
        self, *, spec: str, import_root: str, workdir: Path, env: dict[str, str]
    ) -> ForkedChild:
        """A new session process for `spec` (raises `ZygoteFailed` if its zygote cannot start)."""
        key = (spec, import_root)
        zygote = await self._zygote(key)
        try:
            return await zygote.fork(workdir=workdir, env=env)
        except (ConnectionError, FileNotFoundError):
            pass  # it died since the last session (asyncio has not noticed yet): replace it once
        await self._retire(key, zygote)
        zygote = await self._zygote(key)
        try:
            return await zygote.fork(workdir=workdir, env=env)
        except (ConnectionError, FileNotFoundError) as exc:
            raise RuntimeStartError(
                f"the zygote of agent {spec} (pid {zygote.process.pid}) refused a fork request "
                f"right after it started: {exc!r}; use start_method='spawn' to bypass zygotes"
            ) from exc

    async def aclose(self) -> None:
        self._closed = True
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        self._starting.clear()
        await asyncio.gather(*(z.stop(self.kill_grace_s) for z in list(self._zygotes)))
        self._zygotes.clear()

    async def _zygote(self, key: _ZygoteKey) -> _Zygote:
        if self._closed:
            raise ZygoteFailed(Status.AGENT_ERROR, f"agent {key[0]}: the local runtime is closed")
        task = self._starting.get(key)
        if task is not None and task.done():
            failed = task.cancelled() or task.exception() is not None
            if failed or not task.result().alive:
                if not failed:
                    await self._retire(key, task.result())
                task = None
        if task is None:
            task = asyncio.create_task(self._start(*key))
            task.add_done_callback(_retrieve_exception)
            self._starting[key] = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this session was cancelled, not just the zygote's start
            raise ZygoteFailed(
                Status.AGENT_ERROR,
                f"agent {key[0]}: the local runtime was closed while its zygote was starting",
            ) from None

    async def _retire(self, key: _ZygoteKey, zygote: _Zygote) -> None:
        task = self._starting.get(key)
        if task is not None and task.done() and not task.cancelled() and not task.exception():
            if task.result() is zygote:
                del self._starting[key]
        self._zygotes.discard(zygote)
        await zygote.stop(self.kill_grace_s)

    async def _start(self, spec: str, import_root: str) -> _Zygote:
        directory = Path(tempfile.mkdtemp(prefix="arl-zygote-"))
        socket_path = directory / "fork.sock"
        stderr_path = directory / "zygote-stderr.log"
        try:
            env = self.environment(directory, import_root)
            with open(stderr_path, "wb") as stderr_file:
                process = await asyncio.create_subprocess_exec(
                    self.python, "-u", str(_ZYGOTE_SCRIPT), "--agent", spec,
                    "--socket", str(socket_path), "--parent-pid", str(os.getpid()),
                    cwd=directory, env=env, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=stderr_file, start_new_session=True,
                )  # fmt: skip
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            raise RuntimeStartError(
                f"cannot start the agent zygote with python {self.python!r}: {exc}; "
                "set the local runtime's `python` to a working interpreter"
            ) from exc
        zygote = _Zygote(process, directory, socket_path)
        try:
            await self._await_ready(zygote, spec)
        except ZygoteFailed as failure:
            failure.stderr_tail = read_tail(stderr_path)
            await zygote.stop(0)
            raise
        except BaseException:
            await zygote.stop(0)
            raise
        self._zygotes.add(zygote)
        return zygote

    async def _await_ready(self, zygote: _Zygote, spec: str) -> None:
        assert zygote.process.stdout is not None
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                line = await zygote.process.stdout.readline()
                if not line:
                    await zygote.process.wait()
        except TimeoutError:
            raise ZygoteFailed(
                Status.TIMEOUT,
                f"agent {spec} did not become ready within startup_timeout_s="
                f"{self.startup_timeout_s:g}s (importing it in its zygote)",
            ) from None
        if not line:
            raise ZygoteFailed(
                Status.AGENT_ERROR,
                f"agent {spec}: its zygote exited before it was ready; "
                f"exit code {zygote.process.returncode}",
            )
        try:
            ready = json.loads(line)
        except json.JSONDecodeError:
            raise ZygoteFailed(
                Status.AGENT_ERROR,
                f"agent {spec}: its zygote wrote an unexpected ready line {line[:200]!r}",
            ) from None
        if "error" in ready:
            raise ZygoteFailed(
                Status.AGENT_ERROR, f"cannot load the agent: {ready['error']}"
            )


def read_tail(path: Path, max_bytes: int = 2048) -> str:
    """The last `max_bytes` of a log file, decoded ("" if it does not exist)."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - max_bytes))
            return log_file.read().decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return ""


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by `pid` (just `pid` if it has no group of its own yet)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    except PermissionError:
        pass


def _retrieve_exception(task: asyncio.Task[_Zygote]) -> None:
    """Mark a failed start as seen: its waiters got it, or were cancelled and never will."""
    if not task.cancelled():
        task.exception()
