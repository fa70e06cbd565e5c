"""Starting one spawned agent process for the `local` runtime (`local.py`): the agent server's
argv, its isolation wrapper (`isolation.py`) and cgroup prefix, and telling bubblewrap's own
set-up failure (the agent never ran) from the agent's.

Why a set-up failure is retried: `--ro-bind / /` copies the host's mounts recursively, among
them the size-limited tmpfs of every other live session (`_session_caps.py`). When one of those
sessions ends between the copy and bubblewrap's read-only remount of it, bubblewrap stops with
its own error ("bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:
remount /newroot/tmp/arl-...: No such file or directory") before the agent started; a second
launch no longer sees that mount. About 1 in 64 sessions under two busy workers hit it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from pathlib import Path

from ..errors import RuntimeStartError
from ._local_session import LocalSession
from ._processes import SpawnedChild
from ._rooted import RootedBubblewrap
from ._zygote_pool import read_tail
from .isolation import Isolation, NoIsolation, SessionUid

SERVER_SCRIPT = Path(__file__).with_name("_agent_server.py")
HARNESS_SRC = Path(__file__).resolve().parents[2]
AGENT_SOCKET = ".agent.sock"
MAX_UNIX_PATH = 107
SETUP_ATTEMPTS = 3  # launches of one session while bubblewrap's own set-up fails
_BWRAP_PREFIX = "bwrap: "


async def spawn_agent(session: LocalSession, *, python: str, isolation: Isolation, spec: str,
                      import_root: str, env: dict[str, str]) -> SpawnedChild:
    """Start `_agent_server.py` for `spec` in `session`'s directory, under the session's own
    isolation (the runtime's `isolation`, or rooted in the task's environment, whose interpreter
    it runs) and its caps; its stderr goes to the session's log (truncated on each launch)."""
    rooted = isinstance(session.isolation, RootedBubblewrap)
    executable = session.isolation.python if rooted else shutil.which(python)
    if executable is None:
        raise RuntimeStartError(
            f"cannot start the agent process with python {python!r}: not an executable "
            "file or a command on PATH; set the local runtime's `python` to a working interpreter"
        )
    argv = [executable, "-u", str(SERVER_SCRIPT), "--agent", spec]
    if isinstance(isolation, NoIsolation):
        argv += ["--parent-pid", str(os.getpid())]
    else:  # bubblewrap dies with the harness; a uid session watches its parent itself
        socket_path = str(session.workdir / AGENT_SOCKET)
        if len(socket_path) > MAX_UNIX_PATH:
            raise RuntimeStartError(
                f"session directory {session.workdir} is too long for a unix socket path "
                f"({len(socket_path)} > {MAX_UNIX_PATH} bytes); set a shorter base_dir"
            )
        argv += ["--unix", socket_path]
        if isinstance(isolation, SessionUid):
            argv += ["--parent-pid", str(os.getpid())]
    info_read = info_write = None
    if isolation.namespaced:
        info_read, info_write = os.pipe()
        os.set_blocking(info_read, False)
    plan = session.isolation.launch(
        argv, workdir=session.workdir, info_fd=info_write,
        readable=[Path(import_root), HARNESS_SRC],
        hosts_file=session.network.hosts_file if session.network is not None else None)
    plan = dataclasses.replace(plan, argv=[*session.caps.argv_prefix(), *plan.argv])
    try:
        with open(session.stderr_path, "wb") as stderr_file:
            if plan.user is not None:
                os.fchown(stderr_file.fileno(), plan.user, plan.user)
            process = await asyncio.create_subprocess_exec(
                *plan.argv,
                cwd=session.workdir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr_file,
                **plan.popen_kwargs(),
            )
    except OSError as exc:
        if info_read is not None:
            os.close(info_read)
        raise RuntimeStartError(
            f"cannot start the agent process with python {python!r}"
            f" (isolation {isolation.name}): {exc}; set the local runtime's `python` to "
            "a working interpreter"
        ) from exc
    finally:
        if info_write is not None:
            os.close(info_write)
    session.caps.root_pid = process.pid
    return SpawnedChild(process, info_fd=info_read)


def sandbox_setup_failed(session: LocalSession, isolation: Isolation) -> bool:
    """Whether the session's process ended in bubblewrap's own set-up, before the agent ran: it
    exited, and the first line of its stderr is bubblewrap's ("bwrap: ..."); a Python agent
    server that started writes nothing like it."""
    if not isolation.namespaced or session.child is None or not session.child.exited:
        return False
    head = read_tail(session.stderr_path, 4096).lstrip()
    return head.startswith(_BWRAP_PREFIX) and "Traceback" not in head
