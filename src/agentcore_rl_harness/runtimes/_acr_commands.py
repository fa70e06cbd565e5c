"""Shell and files inside a live AgentCore session (`arl.Sandbox`'s ACR backend).

Every operation is one InvokeAgentRuntimeCommand on the session's runtime session id: a shell
command (argv quoted with shlex, at most 65536 characters) whose output comes back as an event
stream (contentStart, contentDelta {stdout, stderr}, contentStop {exitCode, status}). Output is
capped here while it streams (`ExecResult.stdout_truncated`); a timeout goes both to the service
(the body's `timeout`) and to a client-side deadline a little later, so a stalled stream cannot
hang the caller. Background commands run detached in their own process group, writing to files
under `$TMPDIR/.arl-bg` in the session and polled from here; they are killed at `aclose()`.
Files move as base64 inside commands, in chunks that fit one command each.

boto3 is synchronous: its calls run in worker threads. Throttling is resent (the command did not
run); every other AWS failure becomes a `SandboxError` naming the session, the command and a fix.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import math
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import SandboxError
from . import _acr_shell as shell
from ._acr_calls import describe_failure
from ._retry import Backoff, GaveUp, retry_call
from .sandbox import DEFAULT_FILE_CAP, DEFAULT_OUTPUT_CAP, BackgroundHandle, ExecResult

logger = logging.getLogger(__name__)

MAX_COMMAND_TIMEOUT_S = 3600
OPERATION = "InvokeAgentRuntimeCommand"
_FIXES = {
    "ResourceNotFoundException": "check the runtime ARN and qualifier "
    "(`aws bedrock-agentcore-control list-agent-runtimes`) and that the session is still live",
    "AccessDeniedException": "grant the caller bedrock-agentcore:InvokeAgentRuntimeCommand on "
    "this runtime",
    "ValidationException": "the command or its timeout was refused; keep commands under "
    f"{shell.MAX_COMMAND_CHARS} characters and timeouts within 1-{MAX_COMMAND_TIMEOUT_S} s",
    "ThrottlingException": "lower the command rate or raise the runtime's quota",
    "ServiceQuotaExceededException": "lower the command rate or raise the runtime's quota",
}


@dataclass(frozen=True)
class _Output:
    """What one command sent back: capped bytes per stream and how it stopped."""

    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    exit_code: int | None
    timed_out: bool


class _CommandCall:
    """One InvokeAgentRuntimeCommand, opened and read in worker threads.

    `abandon()` (from the event loop, past the deadline or on cancellation) returns at once: the
    stream is closed from a thread of its own (closing waits for a read in progress), the reader
    stops at its next event, and a response that arrives later is closed unread. A stream that
    sends nothing more keeps its reader until the service's own timeout ends it.
    """

    def __init__(self, client: Any, request: dict[str, Any], cap: int) -> None:
        self.client = client
        self.request = request
        self.cap = cap
        self.kept = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.stop: dict[str, Any] | None = None
        self._stream: Any = None
        self._abandoned = False
        self._lock = threading.Lock()

    def open(self) -> None:
        stream = self.client.invoke_agent_runtime_command(**self.request)["stream"]
        with self._lock:
            self._stream = stream
            abandoned = self._abandoned
        if abandoned:
            stream.close()

    def read(self) -> None:
        try:
            for event in self._stream:
                if self._abandoned:
                    break
                chunk = event.get("chunk") or {}
                if "contentDelta" in chunk:
                    for name, text in chunk["contentDelta"].items():
                        if name in self.kept and text:
                            self._keep(name, text.encode())
                elif "contentStop" in chunk:
                    self.stop = chunk["contentStop"]
        finally:
            self._stream.close()

    def _keep(self, name: str, data: bytes) -> None:
        with self._lock:
            kept = self.kept[name]
            room = self.cap - len(kept)
            if room > 0:
                kept += data[:room]
            if len(data) > max(room, 0):
                self.truncated[name] = True

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            stream = self._stream
        if stream is not None:
            threading.Thread(target=stream.close, daemon=True).start()

    def output(self, *, timed_out: bool) -> _Output:
        with self._lock:
            stop = self.stop or {}
            timed_out = timed_out or stop.get("status") == "TIMED_OUT"
            return _Output(
                stdout=bytes(self.kept["stdout"]), stderr=bytes(self.kept["stderr"]),
                stdout_truncated=self.truncated["stdout"],
                stderr_truncated=self.truncated["stderr"],
                exit_code=None if timed_out else stop.get("exitCode"), timed_out=timed_out,
            )


class AcrBackgroundProcess(BackgroundHandle):
    """A command started with `background=True` in an ACR session: poll it, wait for it, kill it.

    The same public surface as the local `BackgroundProcess`; `status()` and `running` report
    what the last poll of the session saw (polls back off from `poll_initial_s` to `poll_max_s`).
    """

    def __init__(self, sandbox: AcrSessionSandbox, *, argv: tuple[str, ...], handle_id: str,
                 pid: int, poll_initial_s: float, poll_max_s: float) -> None:
        self.sandbox = sandbox
        self.argv = argv
        self.handle_id = handle_id
        self.pid = pid
        self.started = time.monotonic()
        self._poll = (poll_initial_s, poll_max_s)
        self._wake = asyncio.Event()
        self._task = asyncio.ensure_future(self._watch())

    async def kill(self) -> ExecResult:
        """Kill its process group in the session and return what it wrote."""
        if self.running:
            await self.sandbox._kill_background(self)
            self._wake.set()
        return await self._task

    async def _watch(self) -> ExecResult:
        delay, longest = self._poll
        while True:
            finished = await self.sandbox._poll_background(self)
            if finished is not None:
                return finished
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            delay = min(delay * 1.5, longest)



class AcrSessionSandbox:
    """Commands and files inside one AgentCore runtime session (see the module docstring).

    `client` is a boto3 `bedrock-agentcore` client; `executor` runs its blocking calls (None:
    asyncio's default pool). `deadline_grace_s` is how long past a command's timeout the stream
    may still take before it is abandoned as timed out.
    """

    def __init__(
        self, client: Any, arn: str, session_id: str, *, qualifier: str = "DEFAULT",
        output_cap: int = DEFAULT_OUTPUT_CAP, backoff: Backoff | None = None,
        executor: concurrent.futures.Executor | None = None, deadline_grace_s: float = 10.0,
        poll_initial_s: float = 0.2, poll_max_s: float = 2.0,
    ) -> None:
        self.client = client
        self.arn = arn
        self.session_id = session_id
        self.qualifier = qualifier
        self.output_cap = output_cap
        self.backoff = backoff or Backoff(attempts=5, initial_s=0.5, max_s=8.0)
        self.deadline_grace_s = deadline_grace_s
        self._executor = executor
        self._poll = (poll_initial_s, poll_max_s)
        self._background: set[AcrBackgroundProcess] = set()
        self._closed = False

    async def exec(
        self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = 60.0, background: bool = False, stdin: bytes | None = None,
    ) -> ExecResult | AcrBackgroundProcess:
        """Run `argv` in the session; a relative `cwd` is under the session's working directory.

        Foreground commands last at most 3600 s (the service's limit; None means that limit);
        background ones as long as `timeout` (None: until killed or the session ends).
        """
        argv_tuple = self._checked_argv(argv)
        command_argv = shell.with_env(argv_tuple, env)
        if background:
            if stdin is not None:
                raise SandboxError(f"stdin is not supported with background=True ({argv_tuple!r});"
                                   " put_file the input and redirect it in a shell command")
            return await self._start_background(argv_tuple, command_argv, cwd, timeout)
        if timeout is not None and timeout > MAX_COMMAND_TIMEOUT_S:
            raise SandboxError(
                f"timeout={timeout:g}s for {argv_tuple!r} in session {self.session_id} is over "
                f"ACR's {MAX_COMMAND_TIMEOUT_S} s per command; pass background=True for longer "
                "runs")
        command = shell.exec_command(command_argv, cwd=cwd, stdin=stdin)
        started = time.monotonic()
        output = await self._run(command, timeout=timeout, cap=self.output_cap, what=argv_tuple)
        return _result(argv_tuple, output, exit_code=output.exit_code,
                       timed_out=output.timed_out, started=started)

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Write `data` to `path` in the session (parents created), replacing it atomically."""
        self._check_open()
        payload = data.encode() if isinstance(data, str) else bytes(data)
        commands, cleanup = shell.put_commands(path, payload, mode=mode,
                                               part_id=secrets.token_hex(4))
        for command in commands:
            output = await self._run(command, timeout=300, cap=self.output_cap, what=path)
            if output.exit_code != 0:
                await self._run(cleanup, timeout=60, cap=4096, what=path)
                raise SandboxError(f"cannot write {path!r} in session {self.session_id}: "
                                   f"{_reason(output)}")

    async def get_file(self, path: str, *, max_bytes: int = DEFAULT_FILE_CAP) -> bytes:
        """The bytes of `path` in the session (SandboxError if missing or over `max_bytes`)."""
        self._check_open()
        output = await self._run(shell.get_command(path, max_bytes=max_bytes), timeout=300,
                                 cap=shell.base64_size(max_bytes), what=path)
        if output.exit_code == 3 and shell.TOO_LARGE.encode() in output.stderr:
            raise SandboxError(f"{path!r} in session {self.session_id} is larger than "
                               f"max_bytes={max_bytes}; pass a larger max_bytes")
        if output.exit_code != 0:
            raise SandboxError(f"cannot read {path!r} in session {self.session_id}: "
                               f"{_reason(output)}")
        size, _, encoded = output.stdout.partition(b"\n")
        data = base64.b64decode(encoded)
        if output.stdout_truncated or not size.strip().isdigit() or len(data) != int(size):
            raise SandboxError(f"{path!r} in session {self.session_id} came back incomplete "
                               f"({len(data)} bytes, {size[:40]!r} announced); retry the read")
        return data

    async def aclose(self) -> None:
        """Kill every background command still running (the session is ending)."""
        self._closed = True
        for handle in list(self._background):
            try:
                await handle.kill()
            except SandboxError as exc:  # the session is gone, and its processes with it
                logger.debug("background %r not killed: %s", handle.argv, exc)
        self._background.clear()

    # -- background commands ----------------------------------------------------------------------

    async def _start_background(self, argv: tuple[str, ...], command_argv: tuple[str, ...],
                                cwd: str | None, timeout: float | None) -> AcrBackgroundProcess:
        handle_id = secrets.token_hex(8)
        launch = shell.launch_command(handle_id, command_argv, cwd=cwd, timeout=timeout)
        output = await self._run(launch, timeout=60, cap=4096, what=argv)
        pid = output.stdout.decode().strip()
        if output.exit_code != 0 or not pid.isdigit():
            raise SandboxError(f"cannot start {argv!r} in the background in session "
                               f"{self.session_id}: {_reason(output)}")
        handle = AcrBackgroundProcess(self, argv=argv, handle_id=handle_id, pid=int(pid),
                                      poll_initial_s=self._poll[0], poll_max_s=self._poll[1])
        self._background.add(handle)
        return handle

    async def _poll_background(self, handle: AcrBackgroundProcess) -> ExecResult | None:
        """None while the command runs; its result (files read, then removed) once it ended."""
        command = shell.poll_command(handle.handle_id, cap=self.output_cap)
        output = await self._run(command, timeout=60, cap=2 * shell.base64_size(self.output_cap),
                                 what=handle.argv)
        polled = shell.parse_poll(output.stdout.decode(errors="replace"), cap=self.output_cap)
        if output.exit_code != 0 or polled.state not in ("running", "gone", "rc"):
            raise SandboxError(f"cannot poll background {handle.argv!r} (pid {handle.pid}) in "
                               f"session {self.session_id}: {_reason(output)}")
        if polled.state == "running":
            return None
        if polled.state == "gone":
            raise SandboxError(
                f"background {handle.argv!r} (pid {handle.pid}) in session {self.session_id} "
                "ended without an exit status (its supervisor was killed, or the session "
                "restarted); run it again")
        self._background.discard(handle)
        exit_code = None if polled.timed_out else -9 if polled.killed else polled.exit_code
        return _result(handle.argv, polled, exit_code=exit_code, timed_out=polled.timed_out,
                       started=handle.started)

    async def _kill_background(self, handle: AcrBackgroundProcess) -> None:
        await self._run(shell.kill_command(handle.handle_id), timeout=60, cap=4096,
                        what=handle.argv)

    # -- one call ---------------------------------------------------------------------------------

    async def _run(self, command: str, *, timeout: float | None, cap: int,
                   what: object) -> _Output:
        """One command through the service, its output capped at `cap` bytes per stream."""
        if len(command) > shell.MAX_COMMAND_CHARS:
            raise SandboxError(
                f"the command for {what!r} is {len(command)} characters; {OPERATION} takes at "
                f"most {shell.MAX_COMMAND_CHARS}: put large inputs in a file with put_file")
        limit = MAX_COMMAND_TIMEOUT_S if timeout is None else min(timeout, MAX_COMMAND_TIMEOUT_S)
        call = _CommandCall(self.client, {
            "agentRuntimeArn": self.arn, "runtimeSessionId": self.session_id,
            "qualifier": self.qualifier, "contentType": "application/json",
            "accept": "application/vnd.amazon.eventstream",
            "body": {"command": command, "timeout": max(1, math.ceil(limit))},
        }, cap)
        try:
            async with asyncio.timeout(limit + self.deadline_grace_s):
                await retry_call(lambda: self._in_thread(call.open), backoff=self.backoff,
                                 classify=lambda exc: describe_failure(exc, OPERATION))
                await self._in_thread(call.read)
        except TimeoutError:
            call.abandon()
            return call.output(timed_out=True)
        except asyncio.CancelledError:
            call.abandon()
            raise
        except GaveUp as gave_up:
            raise self._error(what, gave_up.failure.code, gave_up.failure.text) from None
        except Exception as exc:
            failure = describe_failure(exc, OPERATION)
            if failure is None:
                raise
            raise self._error(what, failure.code, failure.text) from exc
        if call.stop is None:
            raise SandboxError(f"{OPERATION} for {what!r} in session {self.session_id} ended "
                               "without a contentStop event (the stream was cut); run it again")
        return call.output(timed_out=False)

    async def _in_thread(self, fn: Callable[[], None]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _error(self, what: object, code: str, text: str) -> SandboxError:
        fix = _FIXES.get(code[:1].upper() + code[1:], "check the session and runtime, then retry")
        return SandboxError(f"{what!r} in session {self.session_id} on {self.arn}: {text}; {fix}")

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"session {self.session_id} has ended; its sandbox is gone")

    def _checked_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        self._check_open()
        argv_tuple = tuple(str(a) for a in argv)
        if not argv_tuple:
            raise SandboxError("exec needs a non-empty argv, e.g. ['ls', '-l']")
        return argv_tuple


def _result(argv: tuple[str, ...], output: Any, *, exit_code: int | None, timed_out: bool,
            started: float) -> ExecResult:
    """An ExecResult from what came back (`_Output` or a background poll's `Polled`)."""
    return ExecResult(
        argv=argv, exit_code=exit_code, stdout=output.stdout.decode(errors="replace"),
        stderr=output.stderr.decode(errors="replace"), timed_out=timed_out,
        stdout_truncated=output.stdout_truncated, stderr_truncated=output.stderr_truncated,
        elapsed_s=time.monotonic() - started, stdout_bytes=output.stdout,
    )


def _reason(output: _Output) -> str:
    if output.timed_out:
        return "it timed out"
    return output.stderr.decode(errors="replace").strip() or f"exit code {output.exit_code}"
