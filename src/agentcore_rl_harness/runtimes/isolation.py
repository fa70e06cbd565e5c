"""How the `local` runtime walls one agent session off from the others (`runtime.isolation`).

- `bwrap` (the default where it works): each session runs under bubblewrap with its own user,
  mount, PID, IPC and UTS namespaces and no capabilities. Its mount view is the host read-only,
  with fresh tmpfs over the places where sessions and the harness keep data (the temp dir, the
  harness user's home, `/var/tmp`, `/dev/shm`, the run directory, ...); the Python installation,
  the harness and the agent's own folder are bound back read-only, and only the session's own
  directory is writable. Its PID namespace holds only its own processes, so other sessions and
  the harness cannot be listed, signalled or traced; when the session ends its namespace's init
  dies and the kernel kills everything left in it. The agent serves over a unix socket inside
  its own directory, so no other session can reach it either.
- `uid` (the fallback where bubblewrap is missing, as root): each session runs as its own
  unprivileged uid with a private 0700 directory: other sessions' files and processes are
  another user's (no read, write, signal or ptrace), but the process list and world-readable
  host files stay visible. The interpreter must be readable by that uid.
- `none`: the session runs as the harness user; only asked for, and warned about.

Resource limits (`SandboxLimits`: address space, file size, open files, processes) apply in
every mode; the session's wall time is the runtime's own timeout. Network (`network.py`): under
bubblewrap a session has its own network namespace and reaches only what is relayed into it (the
gateway, `runtime.network.allow`); `uid` and `none` share the host's network, where the gateway
refuses any request without the session's own unguessable key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._sandbox_paths import default_hidden, hidden_roots, python_paths, rebinds
from ._session_caps import check_session_limits
from .network import NetworkPolicy

logger = logging.getLogger(__name__)

ISOLATION_KINDS = ("auto", "bwrap", "uid", "none")
START_METHODS = ("auto", "fork", "spawn")  # the local runtime's; fork serves isolation=none only
SESSION_UID_BASE = 200_000  # per-session uids: 200000 + n (uid isolation)
SESSION_UID_SPAN = 100_000
_SANDBOX_UID = 1000  # the agent's uid inside its bubblewrap user namespace
_MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    """rlimits of every session process (None: inherit the harness's)."""

    memory_mb: int | None = 8192  # RLIMIT_AS: address space per process
    file_size_mb: int | None = 1024  # RLIMIT_FSIZE: largest file a session may write
    open_files: int | None = 4096  # RLIMIT_NOFILE
    processes: int | None = 1024  # RLIMIT_NPROC: counted per uid (uid isolation) or user namespace
    # Session-wide caps, all its processes together (_session_caps.py; null: no cap)
    session_memory_mb: int | str | None = "auto"  # auto: half the RAM split over `concurrency`
    session_disk_mb: int | None = 1024  # its writable dirs (a size-limited tmpfs each)
    session_pids: int | None = 512  # processes and threads
    session_cpu: float | str | None = "auto"  # cores (CFS quota); auto: half the machine's
    session_result_mb: int | None = 64  # the largest answer read from the agent

    def check(self) -> None:
        for name in ("memory_mb", "file_size_mb", "open_files", "processes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"runtime.limits.{name} must be >= 1 or null, got {value}")
        check_session_limits(self)

    def values(self) -> list[tuple[str, int, int]]:
        """(prlimit option, resource, value) of each limit that is set, the value capped at the
        harness's own hard limit (a process may not raise its hard limit)."""
        chosen = []
        for option, which, value in (
            ("--as", resource.RLIMIT_AS, self.memory_mb and self.memory_mb * _MIB),
            ("--fsize", resource.RLIMIT_FSIZE, self.file_size_mb and self.file_size_mb * _MIB),
            ("--nofile", resource.RLIMIT_NOFILE, self.open_files),
            ("--nproc", resource.RLIMIT_NPROC, self.processes),
        ):
            if value:
                _, hard = resource.getrlimit(which)
                chosen.append((option, which, value if hard == resource.RLIM_INFINITY else min(value, hard)))
        return chosen

    def apply(self) -> None:
        """Set the limits on the calling process (a child between fork and exec)."""
        for _, which, limit in self.values():
            resource.setrlimit(which, (limit, limit))

    def prlimit_argv(self) -> list[str] | None:
        """A `prlimit` prefix that sets the limits and execs the command (same pid), or None when
        util-linux's prlimit is missing. [] when no limit is set."""
        chosen = self.values()
        if not chosen:
            return []
        prlimit = _prlimit()
        if prlimit is None:
            return None
        return [prlimit, *(f"{option}={limit}:{limit}" for option, _, limit in chosen), "--"]


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit")


@dataclass(frozen=True)
class LaunchPlan:
    """How to start one process inside a session: the argv, and what runs between fork and exec.

    Where it can, a plan needs no Python between fork and exec (`preexec` None): its own session
    by `start_new_session` and the limits by a `prlimit` prefix, so CPython starts it with vfork.
    A fork with a `preexec_fn` copies the harness's page tables (~300 ms at the ~6 GB a trainer
    holds, `bench/spawn.py`), and every `sandbox.exec` / `get_file` is one such start, on the
    event loop."""

    argv: list[str]
    preexec: Callable[[], None] | None
    pass_fds: tuple[int, ...] = ()
    user: int | None = None
    new_session: bool = False

    def popen_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `subprocess.Popen` / `asyncio.create_subprocess_exec`."""
        return {"preexec_fn": self.preexec, "start_new_session": self.new_session, "pass_fds": self.pass_fds}


class Isolation:
    """One isolation mode: prepares a session's directory and wraps the commands run in it."""

    name = "none"
    namespaced = False  # commands can be run inside a live session by joining its namespaces

    def __init__(self, limits: SandboxLimits, *, hidden: Sequence[Path] = (),
                 readable: Sequence[Path] = (), writable: Sequence[Path] = (),
                 interpreter: Sequence[Path] = (), network: NetworkPolicy | None = None) -> None:
        """`interpreter`: what the harness's Python needs to read (not used in an environment,
        which brings its own); `readable`: what the user bound in (`runtime.readable_paths`)."""
        self.limits = limits
        self.interpreter = tuple(interpreter)
        self.network = network or NetworkPolicy(mode="host")
        self.hidden = tuple(hidden)
        self.readable = tuple(readable)
        self.writable = tuple(writable)

    @property
    def isolates_network(self) -> bool:
        """Sessions get their own network namespace (reaching only what is relayed in)."""
        return False

    def prepare(self, workdir: Path) -> None:
        """Make `workdir` (just created by the harness) the session's own."""

    def session_tmpfs(self, workdir: Path) -> list[Path]:
        """The tmpfs a session writes inside its own namespaces (none outside bubblewrap)."""
        return []

    def session_env(self, env: dict[str, str]) -> dict[str, str]:
        """The variables a session's processes get, from those the harness chose (`env`)."""
        return env

    def launch(self, argv: Sequence[str], *, workdir: Path, readable: Iterable[Path] = (),
               info_fd: int | None = None, hosts_file: Path | None = None) -> LaunchPlan:
        """The plan that starts `argv` as the session's first process, in `workdir`."""
        return self._plan(argv)

    def enter(self, argv: Sequence[str], *, host_pid: int, cwd: str) -> LaunchPlan:
        """The plan that runs `argv` inside the live session whose first process is `host_pid`."""
        return self._plan(argv)

    def _plan(self, argv: Sequence[str], pass_fds: tuple[int, ...] = ()) -> LaunchPlan:
        """`argv` in a new session under the limits: a prlimit prefix (vfork), else a preexec."""
        prefix = self.limits.prlimit_argv()
        if prefix is None:
            return LaunchPlan(list(argv), preexec=self._preexec, pass_fds=pass_fds)
        return LaunchPlan([*prefix, *argv], preexec=None, pass_fds=pass_fds, new_session=True)

    def _preexec(self) -> None:
        os.setsid()
        self.limits.apply()


class NoIsolation(Isolation):
    name = "none"


class SessionUid(Isolation):
    """Each session as its own unprivileged uid (and gid), in a 0700 directory it owns."""

    name = "uid"
    _counter = itertools.count()

    def __init__(self, limits: SandboxLimits, **kwargs: Any) -> None:
        super().__init__(limits, **kwargs)
        self._uids: dict[Path, int] = {}

    def prepare(self, workdir: Path) -> None:
        uid = SESSION_UID_BASE + (os.getpid() * 7919 + next(self._counter)) % SESSION_UID_SPAN
        self._uids[workdir] = uid
        for path in [workdir, *workdir.rglob("*")]:
            os.lchown(path, uid, uid)
        workdir.chmod(0o700)

    def uid_of(self, workdir: Path) -> int:
        return self._uids[workdir]

    def launch(self, argv: Sequence[str], *, workdir: Path, readable: Iterable[Path] = (),
               info_fd: int | None = None, hosts_file: Path | None = None) -> LaunchPlan:
        uid = self._uids[workdir]
        return LaunchPlan(list(argv), preexec=functools.partial(self._drop_to, uid), user=uid)

    def enter(self, argv: Sequence[str], *, host_pid: int, cwd: str) -> LaunchPlan:
        uid = _owner(cwd)
        return LaunchPlan(list(argv), preexec=functools.partial(self._drop_to, uid), user=uid)

    def release(self, workdir: Path) -> None:
        self._uids.pop(workdir, None)

    def _drop_to(self, uid: int) -> None:
        os.setsid()
        self.limits.apply()
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


class Bubblewrap(Isolation):
    """Each session in its own bubblewrap namespaces (see the module docstring)."""

    name = "bwrap"
    namespaced = True

    def __init__(self, limits: SandboxLimits, *, bwrap: str, **kwargs: Any) -> None:
        super().__init__(limits, **kwargs)
        self.bwrap = bwrap

    @property
    def isolates_network(self) -> bool:
        return self.network.isolated

    def launch(self, argv: Sequence[str], *, workdir: Path, readable: Iterable[Path] = (),
               info_fd: int | None = None, hosts_file: Path | None = None) -> LaunchPlan:
        command = [
            self.bwrap, "--die-with-parent", "--new-session",
            "--unshare-user", "--uid", str(_SANDBOX_UID), "--gid", str(_SANDBOX_UID),
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "arl-session", "--cap-drop", "ALL",
            *self._mounts(workdir, [Path(p) for p in readable]),
        ]
        if self.isolates_network:
            command.append("--unshare-net")
            if hosts_file is not None:
                command += ["--ro-bind", str(hosts_file), "/etc/hosts"]
        command += ["--bind", str(workdir), str(workdir), *self._sealed(), "--chdir", str(workdir)]
        pass_fds: tuple[int, ...] = ()
        if info_fd is not None:
            command += ["--info-fd", str(info_fd)]
            pass_fds = (info_fd,)
        return self._plan([*command, "--", *argv], pass_fds)

    def _sealed(self) -> list[str]:
        """What bubblewrap does once every mount is in place (nothing here)."""
        return []

    def _mounts(self, workdir: Path, readable: list[Path]) -> list[str]:
        """The session's view: the host read-only, its private places hidden, what it needs bound."""
        command = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        size = self._tmpfs_size()
        for path in hidden_roots(self.hidden, workdir):
            command += [*size, "--tmpfs", str(path)]
        rebound = rebinds(self.hidden, workdir, [*self.interpreter, *self.readable, *readable])
        for path in rebound:
            command += ["--ro-bind", str(path), str(path)]
        for path in sorted(set(self.hidden), key=lambda p: len(p.parts)):  # e.g. a run dir in a repo
            if path.is_dir() and any(path != bound and path.is_relative_to(bound) for bound in rebound):
                command += [*size, "--tmpfs", str(path)]
        for path in self.writable:
            command += ["--bind", str(path), str(path)]
        return command

    def session_tmpfs(self, workdir: Path) -> list[Path]:
        return hidden_roots(self.hidden, workdir)

    def _tmpfs_size(self) -> list[str]:
        """Bubblewrap's tmpfs as large as session_disk_mb (`--size`: bubblewrap >= 0.5)."""
        disk = self.limits.session_disk_mb
        return ["--size", str(disk * _MIB)] if disk and _bwrap_sizes_tmpfs(self.bwrap) else []

    def enter(self, argv: Sequence[str], *, host_pid: int, cwd: str) -> LaunchPlan:
        nsenter = shutil.which("nsenter") or "nsenter"
        command = [
            nsenter, f"--target={host_pid}", "--user", "--mount", "--pid", "--ipc", "--uts",
            *(["--net"] if self.isolates_network else []),
            f"--setuid={_SANDBOX_UID}", f"--setgid={_SANDBOX_UID}", f"--wd={cwd}", "--",
        ]
        return self._plan([*command, *argv])


def _owner(path: str) -> int:
    return os.stat(path).st_uid


@functools.cache
def _bwrap_sizes_tmpfs(bwrap: str) -> bool:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
        return "--size" in usage.stdout + usage.stderr
    return False


@functools.cache
def bwrap_works(bwrap: str) -> str | None:
    """None if bubblewrap can build a session sandbox here, else why not (cached per process)."""
    try:
        probe = subprocess.run(
            [bwrap, "--unshare-user", "--unshare-pid", "--cap-drop", "ALL", "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc", "--", "true"],
            capture_output=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not run: {exc}"
    if probe.returncode != 0:
        return f"{bwrap} failed: {probe.stderr.decode(errors='replace').strip()[:300]}"
    return None


@dataclass(frozen=True)
class IsolationChoice:
    """The configured `runtime.isolation` and the paths the sandbox must hide or expose."""

    kind: str = "auto"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    hidden: tuple[Path, ...] = ()  # added to default_hidden()
    readable: tuple[Path, ...] = ()  # bound back read-only into every session
    writable: tuple[Path, ...] = ()  # shared read-write by every session (a cache; never data)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)  # bwrap: what sessions reach


def build_isolation(choice: IsolationChoice, *, base_dir: Path | None = None) -> Isolation:
    """The strongest mode this machine supports for `auto`; the named one, or a clear error."""
    if choice.kind not in ISOLATION_KINDS:
        raise ConfigError(
            f"runtime.isolation must be one of {', '.join(ISOLATION_KINDS)}, got {choice.kind!r}"
        )
    choice.limits.check()
    choice.network.check()
    hidden = (*default_hidden(base_dir), *(Path(p).resolve() for p in choice.hidden))
    readable = tuple(Path(p).resolve() for p in choice.readable)
    writable = tuple(Path(p).resolve() for p in choice.writable)
    kwargs: dict[str, Any] = {"hidden": hidden, "readable": readable, "writable": writable,
                              "interpreter": python_paths(), "network": choice.network}
    bwrap = shutil.which("bwrap")
    why_not = "bubblewrap (bwrap) is not installed" if bwrap is None else bwrap_works(bwrap)
    if choice.kind in ("auto", "bwrap") and why_not is None:
        assert bwrap is not None
        if choice.network.isolated and os.geteuid() != 0:
            # setns(2) into a network namespace needs CAP_SYS_ADMIN in the caller's own user
            # namespace too: an unprivileged harness cannot relay the gateway in.
            logger.warning("runtime.network.mode=isolated needs the harness to run as root (it "
                           "joins each session's network namespace to relay the gateway in); "
                           "sessions share the host's network (runtime.network.mode=host)")
            kwargs["network"] = dataclasses.replace(choice.network, mode="host")
        return Bubblewrap(choice.limits, bwrap=bwrap, **kwargs)
    if choice.kind == "bwrap":
        raise ConfigError(
            f"runtime.isolation=bwrap: {why_not}; install it (Debian/Ubuntu: apt-get install "
            "bubblewrap) or choose runtime.isolation=uid (as root) or none"
        )
    can_switch_uid = os.geteuid() == 0
    if choice.kind == "uid" and not can_switch_uid:
        raise ConfigError("runtime.isolation=uid needs root (it runs each session as its own uid); "
                          "use runtime.isolation=bwrap or none")
    if choice.kind == "uid" or (choice.kind == "auto" and can_switch_uid):
        if choice.kind == "auto":
            logger.warning("session isolation: %s; falling back to a uid per session "
                           "(runtime.isolation=uid), which shares the host's network", why_not)
        pids = choice.limits.session_pids  # RLIMIT_NPROC counts per uid: per session here
        per_uid = choice.limits.processes if pids is None else min(pids, choice.limits.processes or pids)
        return SessionUid(dataclasses.replace(choice.limits, processes=per_uid), **kwargs)
    if choice.kind == "auto":
        logger.warning("session isolation: %s and this is not root, so sessions are NOT isolated "
                       "from each other (runtime.isolation=none)", why_not)
    else:
        logger.warning("runtime.isolation=none: agent sessions run as the harness user and can "
                       "read each other's files and signal each other's processes")
    return NoIsolation(choice.limits, **kwargs)
