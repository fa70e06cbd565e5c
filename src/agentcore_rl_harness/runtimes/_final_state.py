"""A session's final files, kept after it ends: packed, bounded, unpacked safely, and restored.

Packed as a gzip tar from the host side after the session's processes are dead: symlinks are
stored as links (never followed), sockets and devices skipped. Unpacked with tarfile's `data`
filter, so no member can land outside the target directory or carry a device node or setuid bit.
`restore` opens the files again in a fresh sandbox isolated like the session (its own namespaces,
uid and limits) for the task to inspect; `KeptFiles` is what the local runtime hands the run core
for one finished session (`LocalRuntime.kept`), restored on first use and removed at `aclose()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import stat
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ..errors import SandboxError
from ._processes import SpawnedChild, killpg, log_rmtree_error, terminate
from .isolation import Isolation, SessionUid
from .sandbox import SessionSandbox

SKIPPED_NAMES = frozenset({".agent.sock", "agent-stderr.log"})


class StateTooLarge(Exception):
    """The session's files exceed the configured bound."""


def pack(workdir: Path, *, max_bytes: int) -> bytes:
    """`workdir`'s files as gzip tar bytes; StateTooLarge when their size passes `max_bytes`."""
    total = 0
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for path in sorted(workdir.rglob("*")):
            relative = path.relative_to(workdir)
            if relative.parts[0] in SKIPPED_NAMES:
                continue
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                continue
            if stat.S_ISREG(mode):
                total += path.lstat().st_size
                if total > max_bytes:
                    raise StateTooLarge(f"the session's files passed {max_bytes} bytes at {relative}")
            archive.add(path, arcname=str(relative), recursive=False)
    return buffer.getvalue()


def unpack(data: bytes, target: Path) -> None:
    """Extract `data` (from `pack`) into the existing directory `target`.

    Absolute symlinks (which the `data` filter refuses) are made last, after every file is
    written, so nothing is ever written through them; they resolve inside the sandbox's view."""
    absolute_links: list[tuple[str, str]] = []

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        if member.issym() and member.linkname.startswith("/"):
            absolute_links.append((member.name, member.linkname))
            return None
        return tarfile.data_filter(member, path)

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(target, filter=keep)
    root = target.resolve()
    for name, link_target in absolute_links:
        destination = target / name
        if not destination.parent.resolve().is_relative_to(root) or destination.exists() \
                or destination.is_symlink():
            raise tarfile.OutsideDestinationError(tarfile.TarInfo(name), str(destination))
        destination.symlink_to(link_target)


def keep(workdir: Path, *, max_bytes: int) -> tuple[bytes | None, str | None]:
    """(the packed files, None), or (None, why they were not kept: too large, unreadable)."""
    try:
        return pack(workdir, max_bytes=max_bytes), None
    except StateTooLarge as exc:
        return None, f"{exc}; raise runtime.final_state_mb to keep larger sessions' files"
    except OSError as exc:
        return None, f"cannot pack the session's files: {exc}"


@contextlib.asynccontextmanager
async def restore(
    final_state: bytes, *, isolation: Isolation, base: Path, workdir: str | None,
    environment: Callable[[Path, str], dict[str, str]], session_id: str,
    startup_timeout_s: float, kill_grace_s: float,
) -> AsyncIterator[SessionSandbox]:
    """A sandbox over `final_state` in a new directory under `base` (`workdir`, the session's old
    one, when free: absolute paths then hold), held open by an idle first process."""
    directory = Path(workdir) if workdir else None
    try:
        if directory is None or directory.parent != base:
            raise FileExistsError  # only a session directory of this runtime's is reused
        directory.mkdir(mode=0o700)
    except FileExistsError:
        directory = Path(tempfile.mkdtemp(prefix="arl-restored-", dir=base))
    process = None
    info_read = info_write = None
    try:
        await asyncio.to_thread(unpack, final_state, directory)
        env = environment(directory, str(directory))
        isolation.prepare(directory)
        if isolation.namespaced:
            info_read, info_write = os.pipe()
        # The idle first process says "ready" once it runs: by then bubblewrap has written the
        # namespace's uid/gid maps and mounts, which a command entering it (nsenter) needs. Its info
        # fd comes earlier; a command started with vfork right after it could find them unwritten.
        plan = isolation.launch(["/bin/sh", "-c", "echo ready && exec sleep infinity"],
                                workdir=directory, info_fd=info_write)
        process = await asyncio.create_subprocess_exec(
            *plan.argv, cwd=directory, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            **plan.popen_kwargs(),
        )
        if info_write is not None:
            os.close(info_write)
            info_write = None
        child = SpawnedChild(process, info_fd=info_read)
        info_read = None
        host_pid = process.pid
        if isolation.namespaced:
            host_pid = await child.wait_sandbox_pid(startup_timeout_s)
        async with asyncio.timeout(startup_timeout_s):
            if (await child.read_ready()).strip() != b"ready":
                raise SandboxError(f"session {session_id}: the restored sandbox did not start "
                                   f"({child.exit_state()}); check that runtime.isolation works on "
                                   "this machine (runtime.isolation=none rules bubblewrap out)")
        sandbox = SessionSandbox(session_id=session_id, isolation=isolation, host_pid=host_pid,
                                 workdir=str(directory), env=env)
        try:
            yield sandbox
        finally:
            await sandbox.aclose()
            await terminate(child, kill_grace_s=kill_grace_s)
    finally:
        for fd in (info_read, info_write):
            if fd is not None:
                os.close(fd)
        if process is not None and process.returncode is None:
            killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(directory, onerror=log_rmtree_error)
        if isinstance(isolation, SessionUid):
            isolation.release(directory)


class KeptFiles:
    """One finished local session's kept files for its task: restored as a sandbox on first
    `open()`, removed at `aclose()` (nothing of the session itself is still running)."""

    live = False

    def __init__(self, restore: Callable[[bytes], contextlib.AbstractAsyncContextManager[SessionSandbox]],
                 final_state: bytes | None, why_missing: str | None, *, session_id: str) -> None:
        self.session_id = session_id
        self._restore = restore  # the runtime's `restore`, in the session's own isolation
        self._state = final_state
        self._why_missing = why_missing
        self._stack: contextlib.AsyncExitStack | None = None

    async def open(self) -> SessionSandbox:
        if self._state is None:
            raise SandboxError(f"session {self.session_id} kept no final files: "
                               f"{self._why_missing or 'the session ended before it started'}")
        self._stack = contextlib.AsyncExitStack()
        return await self._stack.enter_async_context(self._restore(self._state))

    async def aclose(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
