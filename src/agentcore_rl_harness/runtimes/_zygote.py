"""Zygote of the `local` runtime's `fork` start method: import an agent once, fork one server per session.

Run by path as `python -u _zygote.py --agent SPEC --socket PATH --parent-pid PID` (like
`_agent_server.py`, whose loading and serving code it reuses, it imports nothing of ours).

Protocol with the harness:
- stdout: one JSON line, `{"pid": P}` once the agent is imported and PATH listens, or
  `{"error": "..."}` if the agent cannot be loaded (exit code 3). Other output goes to stderr.
- stdin: the harness keeps it open; EOF (or a changed parent pid) means the harness is gone:
  kill every child's process group and exit.
- PATH (a unix socket): one connection per session. The harness sends one JSON line
  `{"workdir": DIR, "env": {...}}`; the zygote forks and answers `{"pid": C}`; the child answers
  `{"port": N, "pid": C}` once its loopback socket listens; after reaping the child the zygote
  answers `{"exit": CODE}` (negative: killed by that signal) and closes. If the harness closes
  its end first, the zygote SIGKILLs the child's process group.

The zygote stays single-threaded (fork copies only the calling thread, so a lock held by another
thread would stay locked forever in the child): no watchdog thread, no event loop; one `select`
loop watches the socket, stdin, the session connections and SIGCHLD (via a wakeup pipe). The
child is free to start threads. Module-level state of the agent is created once here and shared
copy-on-write by every session (gunicorn's `--preload` semantics).

Why not the stdlib's `multiprocessing` forkserver with `set_forkserver_preload` (checked against
CPython 3.11-3.13 `multiprocessing/forkserver.py`):
- There is one forkserver per harness process (a module global), and its preload list is fixed
  when it first starts. The harness runs several agents (one per task, each with its own import
  root and scrubbed environment), so it needs one preloaded server per agent, started and
  restarted on its own.
- The forkserver swallows preload failures (`except ImportError: pass`): an agent that cannot
  be imported would show up as a confusing error in every session instead of one clear
  `{"error": ...}` at start-up.
- A forkserver child runs a picklable target with the forkserver's cwd and environment; each
  session here needs its own workdir, environment and process group (so a timed-out session is
  killed with everything it spawned), set between fork and serve.
- The harness must learn each child's loopback port and exit status, and kill the child when
  its connection drops; the forkserver reports an exit code only through a `Process` object of
  the harness's own, with no hook between fork and the target.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import select
import signal
import socket
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

if __package__:
    from . import _agent_server as agent_server
else:  # run by path: the sibling module (sys.path[0] is this directory until __main__ drops it)
    import _agent_server as agent_server

_POLL_S = 0.5
_REQUEST_TIMEOUT_S = 5.0
_MAX_REQUEST_BYTES = 1 << 20


class Zygote:
    """The fork loop: one listening unix socket, the live children and their connections."""

    def __init__(self, *, app_config: Any, listener: socket.socket, parent_pid: int) -> None:
        self.app_config = app_config
        self.listener = listener
        self.parent_pid = parent_pid
        # pid -> the session's connection (None once the harness dropped it)
        self.children: dict[int, socket.socket | None] = {}
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def run(self) -> None:
        while os.getppid() == self.parent_pid:
            connections = {c.fileno(): pid for pid, c in self.children.items() if c is not None}
            watched = [self.listener.fileno(), sys.stdin.fileno(), self.wake_read, *connections]
            readable, _, _ = select.select(watched, [], [], _POLL_S)
            for fd in readable:
                if fd == self.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_read, 4096)
                elif fd == self.listener.fileno():
                    self._accept()
                elif fd == sys.stdin.fileno():
                    if not os.read(fd, 4096):
                        return  # the harness closed our stdin: it is done with us, or gone
                else:
                    self._drop(connections[fd])
            self._reap()

    def shutdown(self) -> None:
        for pid in self.children:
            _kill_group(pid)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        try:
            connection.settimeout(_REQUEST_TIMEOUT_S)
            request = json.loads(_read_line(connection))
            workdir, env = str(request["workdir"]), dict(request["env"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"zygote: dropped a malformed fork request: {exc!r}", file=sys.stderr)
            connection.close()
            return
        if threading.active_count() > 1:
            print(
                "zygote: the agent module started threads at import; forking anyway (a lock "
                "one of them holds stays locked in the session); use start_method='spawn' if "
                "sessions hang",
                file=sys.stderr,
            )
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = self._become_session(connection, workdir, env)
            except BaseException:  # noqa: BLE001 - the session's stderr is the place to report it
                traceback.print_exc()
            finally:
                os._exit(code)
        self.children[pid] = connection
        with contextlib.suppress(OSError):
            connection.sendall(_line({"pid": pid}))

    def _become_session(self, connection: socket.socket, workdir: str, env: dict[str, str]) -> int:
        """In the forked child: isolate this session, then serve the agent until killed."""
        zygote_pid = os.getppid()
        os.setsid()  # its own process group: the harness kills the session with killpg
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(self.wake_read)
        os.close(self.wake_write)
        self.listener.close()
        for other in self.children.values():
            if other is not None:
                other.close()
        _redirect_output(Path(workdir) / "agent-stderr.log")
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # re-read TMPDIR
        _reseed_random()
        agent_server.exit_with_parent(zygote_pid)
        sock = agent_server.bind_loopback()
        connection.settimeout(_REQUEST_TIMEOUT_S)
        connection.sendall(_line({"port": sock.getsockname()[1], "pid": os.getpid()}))
        connection.close()
        agent_server.serve(self.app_config, sock)
        return 0

    def _drop(self, pid: int) -> None:
        """The harness closed (or wrote to) a session connection: that session is over."""
        connection = self.children[pid]
        assert connection is not None
        self.children[pid] = None
        connection.close()
        _kill_group(pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.children.pop(pid, None)
            if connection is not None:
                with contextlib.suppress(OSError):
                    connection.sendall(_line({"exit": os.waitstatus_to_exitcode(status)}))
                connection.close()


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _read_line(connection: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            raise ValueError(f"connection closed after {len(data)} bytes")
        data += chunk
        if len(data) > _MAX_REQUEST_BYTES:
            raise ValueError(f"request longer than {_MAX_REQUEST_BYTES} bytes")
    return data


def _kill_group(pid: int) -> None:
    """SIGKILL the session's process group (just the pid if it has not called setsid yet)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _redirect_output(path: Path) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.close(null_fd)


def _reseed_random() -> None:
    """Fresh RNG state per session, not the copy every fork inherits from the zygote."""
    random.seed()
    numpy_random = sys.modules.get("numpy.random")  # not imported yet: it seeds itself when it is
    if numpy_random is not None:
        numpy_random.seed()


def _preload() -> None:
    """Import what every session's server needs, so children don't pay for it."""
    import bedrock_agentcore  # noqa: F401
    import uvicorn  # noqa: F401

    with contextlib.suppress(ImportError):
        import openai  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", required=True, help="path/to/agent.py[:attr] or module:attr")
    parser.add_argument("--socket", required=True, help="unix socket path to serve fork requests")
    parser.add_argument("--parent-pid", type=int, required=True, help="exit when it exits")
    args = parser.parse_args(argv)

    sys.stdout.flush()
    ready = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        _preload()
        app_config = agent_server.server_config(agent_server.load_app(args.agent))
    except BaseException as exc:  # the agent's own code: report any failure, including SystemExit
        ready.write(json.dumps({"error": agent_server.load_error_message(exc)}) + "\n")
        ready.close()
        return agent_server.LOAD_FAILED_EXIT_CODE

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket)
    listener.listen(128)
    zygote = Zygote(app_config=app_config, listener=listener, parent_pid=args.parent_pid)
    gc.freeze()  # children's collections then skip (and don't copy-on-write) the preloaded objects
    ready.write(json.dumps({"pid": os.getpid()}) + "\n")
    ready.close()
    try:
        zygote.run()
    finally:
        zygote.shutdown()
    return 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # keep sibling modules (base.py, local.py) off the agent's path
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
