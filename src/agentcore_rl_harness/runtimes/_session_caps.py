"""Session-wide resource caps of the `local` runtime (`runtime.limits.session_*`).

What one session may use, all its processes together - `session_memory_mb`, `session_disk_mb`
(its writable directories), `session_pids` (processes and threads), `session_cpu` (cores) - so a
fork bomb, a memory hog spread over processes or a disk filler ends that session, not the
harness or the other sessions. Mechanisms, chosen once per runtime and logged in one line:

- memory, pids, cpu: a per-session cgroup (`_cgroups.py`, v2 or v1) where the harness may make
  one; else a watchdog that samples the session's process tree (summed RSS, process and thread
  count) and kills it over a cap (a uid session also gets `RLIMIT_NPROC` per its own uid). The
  CPU cap needs a cgroup; without one it is not applied (said at start).
- disk: the session directory is a tmpfs mounted with `size=` (as root); the tmpfs dirs bubblewrap
  puts over /tmp, the home and the other hidden places get `--size` too; without root, the
  watchdog sums the directory's file sizes. The agent's stderr log lives in that directory, so an
  output flood is a disk breach; its answer is read up to `session_result_mb`.

A session over a cap is killed and ends as `agent_error` with an error that starts
`resource_exceeded: <key>=<value> exceeded: <what happened>`; its kept files are kept as for any
failed session.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import logging
import os
import signal
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._cgroups import CgroupLayout, SessionCgroup, find_cgroups
from ._stale import MNT_DETACH, sweep_once

logger = logging.getLogger(__name__)

RESOURCE_EXCEEDED = "resource_exceeded"
SESSION_KEYS = ("session_memory_mb", "session_disk_mb", "session_pids", "session_cpu",
                "session_result_mb")
AUTO = "auto"
STDERR_LOG = "agent-stderr.log"  # in the session dir (_local_session.LocalSession.stderr_path)
MEMORY_SHARE = 0.5  # auto memory: this share of the machine's RAM, split over concurrent sessions
MIN_AUTO_MEMORY_MB = 256
_MIB = 1024 * 1024
_FULL_SLACK_BYTES = 64 * 1024  # a tmpfs with less than this free is full
WATCH_INTERVAL_S = 0.2  # how often a session's counters are read (a cgroup: two small files)
TREE_WATCH_INTERVAL_S = 0.5  # without a cgroup: a scan of /proc
TREE_SIZE_EVERY = 5  # without a tmpfs (not root): the session dir's size every 5th look


def check_session_limits(limits: Any) -> None:
    """Validate the session_* keys of a `SandboxLimits` (ConfigError naming key and value)."""
    for name in SESSION_KEYS:
        value = getattr(limits, name)
        if value is None or (value == AUTO and name in ("session_memory_mb", "session_cpu")):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                name != "session_cpu" and not isinstance(value, int)):
            kind = "a number of cores" if name == "session_cpu" else "an integer"
            auto = ", 'auto'" if name in ("session_memory_mb", "session_cpu") else ""
            raise ConfigError(f"runtime.limits.{name} must be {kind}{auto} or null (no cap), "
                              f"got {value!r}")
        if value <= 0 or (name == "session_pids" and value < 8):
            least = "8 (the agent server alone runs a few threads)" if name == "session_pids" else "> 0"
            raise ConfigError(f"runtime.limits.{name} must be >= {least} or null (no cap), got {value!r}")


def unapplied_limits(limits: Any) -> list[str]:
    """The `runtime.limits` keys set away from their defaults, as `key=value` (what ACR cannot take)."""
    return [f"{f.name}={getattr(limits, f.name)!r}" for f in dataclasses.fields(limits)
            if getattr(limits, f.name) != f.default]


def check_agentcore_limits(limits: Any) -> list[str]:
    """`runtime=agentcore`: validate `runtime.limits` as for local, and say (a warning) which keys
    set away from their defaults the harness cannot apply (ACR's microVM has its own limits).
    Returns those keys as `key=value`."""
    limits.check()
    unapplied = unapplied_limits(limits)
    if unapplied:
        logger.warning("runtime=agentcore: AgentCore Runtime runs each session in its own microVM "
                       "under its own limits; the harness cannot apply runtime.limits %s (they "
                       "apply to runtime=local only)", ", ".join(unapplied))
    return unapplied


@dataclass(frozen=True)
class Caps:
    """The resolved caps of one session (None: no cap)."""

    memory_mb: int | None
    disk_mb: int | None
    pids: int | None
    cpu: float | None
    result_mb: int | None

    @classmethod
    def resolve(cls, limits: Any, *, concurrency: int) -> Caps:
        check_session_limits(limits)
        memory = limits.session_memory_mb
        if memory == AUTO:
            memory = max(MIN_AUTO_MEMORY_MB, int(_machine_mb() * MEMORY_SHARE / max(1, concurrency)))
        cpu = limits.session_cpu
        if cpu == AUTO:
            cpu = float(max(1, (os.cpu_count() or 2) // 2))
        return cls(memory_mb=memory, disk_mb=limits.session_disk_mb, pids=limits.session_pids,
                   cpu=cpu, result_mb=limits.session_result_mb)


class SessionCaps:
    """The caps and the mechanisms chosen for them on this machine (one per runtime)."""

    def __init__(self, caps: Caps, *, cgroups: CgroupLayout | str | None = None,
                 can_mount: bool | None = None) -> None:
        self.caps = caps
        wants_cgroup = any(v is not None for v in (caps.memory_mb, caps.pids, caps.cpu))
        found = (cgroups if cgroups is not None else find_cgroups()) if wants_cgroup else None
        self.cgroups = found if isinstance(found, CgroupLayout) else None
        self.why_no_cgroup = found if isinstance(found, str) else None
        self.can_mount = (os.geteuid() == 0 and _libc() is not None) if can_mount is None else can_mount
        if cgroups is None and can_mount is None:  # the machine's real ones: once per process
            sweep_once(self.cgroups, _libc())

    @property
    def result_bytes(self) -> int | None:
        return _bytes(self.caps.result_mb)

    def describe(self) -> str:
        """One line: each cap and how it is enforced here."""
        c = self.caps
        if self.cgroups is not None:
            how = self.cgroups.describe()
        else:
            how = "a process-tree watchdog" + (f" (no cgroup: {self.why_no_cgroup})" if self.why_no_cgroup else "")
        parts = [f"memory {_mb(c.memory_mb)}, pids {c.pids or 'no cap'} via {how}"]
        if c.cpu is None:
            parts.append("cpu no cap")
        else:
            parts.append(f"cpu {c.cpu:g} cores via {self.cgroups.describe()}" if self.cgroups
                         else f"cpu {c.cpu:g} cores NOT applied (needs a cgroup)")
        disk_how = "a size-limited tmpfs" if self.can_mount else "a watchdog over the directory's size"
        parts.append(f"disk {_mb(c.disk_mb)} via {disk_how}" if c.disk_mb else "disk no cap")
        parts.append(f"result {_mb(c.result_mb)}")
        return "session caps: " + "; ".join(parts)

    def open(self, workdir: Path, *, owner: int | None = None) -> SessionBox:
        """The caps of the session living in `workdir` (before its first process starts)."""
        box = SessionBox(self, workdir)
        _OPEN.add(box)
        if self.caps.disk_mb is not None and self.can_mount:
            box.mount_tmpfs(self.caps.disk_mb)
        if self.cgroups is not None:
            try:
                box.cgroup = self.cgroups.create(memory_bytes=_bytes(self.caps.memory_mb),
                                                 pids=self.caps.pids, cpu=self.caps.cpu, owner=owner)
            except OSError as exc:
                logger.warning("cannot make a cgroup for session %s (%s); its memory and pids "
                               "are watched instead", workdir.name, exc)
        return box


class SessionBox:
    """One session under its caps: its cgroup or watchdog, its tmpfs, and the cap it broke."""

    def __init__(self, caps: SessionCaps, workdir: Path) -> None:
        self.owner = caps
        self.caps = caps.caps
        self.workdir = workdir
        self.cgroup: SessionCgroup | None = None
        self.mounted = False
        self.extra_dirs: list[Path] = []  # more tmpfs the session writes (inside its namespaces)
        self.root_pid: int | None = None  # the session's first process (for the watchdog)
        self.uid: int | None = None  # a uid session's processes are all that uid's
        self.breach: str | None = None
        self._disk_checks = 0

    def mount_tmpfs(self, size_mb: int) -> None:
        libc = _libc()
        options = f"size={size_mb}m,mode=0700".encode()
        if libc is None or libc.mount(b"tmpfs", str(self.workdir).encode(), b"tmpfs",
                                      _MS_NOSUID | _MS_NODEV, options) != 0:
            errno = ctypes.get_errno()
            logger.warning("cannot mount a %d MB tmpfs on %s (%s); its size is watched instead",
                           size_mb, self.workdir, os.strerror(errno) if errno else "no libc")
            return
        self.mounted = True

    def give_to(self, uid: int) -> None:
        """The session runs as `uid` (uid isolation): it joins its cgroup as that uid, and
        without a cgroup its processes are that uid's."""
        self.uid = uid
        if self.cgroup is not None:
            for path in self.cgroup.procs_files():
                os.chown(path, uid, uid)

    def adopt(self, pid: int | None) -> None:
        """Put an already started process (forked by a zygote) into the session's cgroup."""
        self.root_pid = pid
        if self.cgroup is not None and pid is not None:
            for path in self.cgroup.procs_files():
                with contextlib.suppress(OSError):
                    path.write_text(f"{pid}\n")

    def argv_prefix(self) -> list[str]:
        return self.cgroup.join_argv() if self.cgroup is not None else []

    def check(self) -> str | None:
        """The first cap broken so far (also kept in `breach`), or None."""
        if self.breach is None:
            self.breach = self._find_breach()
        return self.breach

    def _find_breach(self) -> str | None:
        caps = self.caps
        if self.cgroup is not None:
            if caps.memory_mb and (why := self.cgroup.memory_breach()):
                return f"session_memory_mb={caps.memory_mb} exceeded: {why}"
            if caps.pids and (why := self.cgroup.pids_breach()):
                return f"session_pids={caps.pids} exceeded: {why}"
        elif caps.memory_mb or caps.pids:
            pids = self._tree()
            if caps.pids and (count := _threads(pids)) > caps.pids:
                return f"session_pids={caps.pids} exceeded: {count} processes and threads"
            if caps.memory_mb and (rss := _rss_bytes(pids)) > caps.memory_mb * _MIB:
                return (f"session_memory_mb={caps.memory_mb} exceeded: its processes hold "
                        f"{rss // _MIB} MB (proportional set size)")
        if caps.disk_mb:
            return self._disk_breach(caps.disk_mb)
        return None

    def _disk_breach(self, disk_mb: int) -> str | None:
        self._disk_checks += 1
        if not self.mounted and self._disk_checks % TREE_SIZE_EVERY == 1:  # a walk: not each time
            used = _tree_size(self.workdir, stop_at=disk_mb * _MIB + 1)
            if used > disk_mb * _MIB:
                return f"session_disk_mb={disk_mb} exceeded: {used // _MIB} MB written under {self.workdir}"
        for path in [self.workdir] * self.mounted + self.extra_dirs:
            with contextlib.suppress(OSError):
                stat = os.statvfs(path)
                if stat.f_bavail * stat.f_frsize < _FULL_SLACK_BYTES:
                    shown = str(path).split("/root", 1)[-1] if path != self.workdir else str(path)
                    return f"session_disk_mb={disk_mb} exceeded: {shown} is full{self._flood()}"
        return None

    def _flood(self) -> str:
        """What filled the session dir when it is the agent's own output (its stderr log)."""
        with contextlib.suppress(OSError):
            size = (self.workdir / STDERR_LOG).stat().st_size
            if size > _MIB:
                return f" ({size // _MIB} MB of it the agent's stdout/stderr: an output flood)"
        return ""

    def _tree(self) -> set[int]:
        """The session's processes: its uid's (uid isolation), else the first one's descendants."""
        children: dict[int, list[int]] = {}
        owned = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                if self.uid is not None:
                    if entry.stat().st_uid == self.uid:
                        owned.add(int(entry.name))
                    continue
                stat = Path(entry.path, "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        if self.uid is not None:
            return owned
        found, todo = set(), [self.root_pid] if self.root_pid else []
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, ()))
        return found

    def kill(self) -> None:
        """SIGKILL all of the session's processes (after a breach)."""
        if self.cgroup is not None:
            self.cgroup.kill()
        for pid in self._tree():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Remove the cgroup (killing what is left) and unmount the tmpfs (after the session's
        files were kept); safe to call once the session ended."""
        if self.cgroup is not None:
            if (why := self.cgroup.remove()) is not None:
                logger.warning("could not remove session cgroup: %s", why)
            self.cgroup = None
        if self.mounted:
            libc = _libc()
            assert libc is not None
            if libc.umount2(str(self.workdir).encode(), MNT_DETACH) != 0:
                logger.warning("could not unmount the tmpfs on %s: %s", self.workdir,
                               os.strerror(ctypes.get_errno()))
            self.mounted = False
        _OPEN.discard(self)


_MS_NOSUID, _MS_NODEV = 2, 4
_OPEN: set[SessionBox] = set()  # closed at exit too: a runtime never closed leaves no mount


@atexit.register
def _close_open_boxes() -> None:
    for box in list(_OPEN):
        with contextlib.suppress(Exception):
            box.close()


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _machine_mb() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // _MIB


def _mb(value: int | None) -> str:
    return f"{value} MB" if value else "no cap"


def _bytes(mb: int | None) -> int | None:
    return mb * _MIB if mb else None


def _threads(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/task"))
    return total


def _rss_bytes(pids: set[int]) -> int:
    """The processes' proportional set size (shared pages split between their sharers, so forked
    workers are not counted many times over); resident size where smaps_rollup is missing."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
            else:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return total


def _tree_size(root: Path, *, stop_at: int) -> int:
    """Bytes of the files under `root` (stops counting past `stop_at`)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            if total >= stop_at:
                return total
    return total


async def watch(box: SessionBox, *, sandbox_pid: Callable[[], int | None],
                tmpfs_dirs: Sequence[Path]) -> None:
    """Read the session's counters until it breaks a cap, then kill it (cancel to stop).
    `tmpfs_dirs`: the tmpfs the sandbox mounts inside its own namespaces, watched through
    /proc/<sandbox_pid>/root once that pid is known."""
    interval = WATCH_INTERVAL_S if box.cgroup is not None else TREE_WATCH_INTERVAL_S
    while True:
        await asyncio.sleep(interval)
        if tmpfs_dirs and not box.extra_dirs and (pid := sandbox_pid()) is not None:
            box.extra_dirs = [Path(f"/proc/{pid}/root") / p.relative_to("/") for p in tmpfs_dirs]
        breach = box.check() if box.cgroup is not None else await asyncio.to_thread(box.check)
        if breach is not None:
            logger.warning("session in %s: %s; killing it", box.workdir, breach)
            await asyncio.to_thread(box.kill)
            return
