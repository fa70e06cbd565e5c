"""A per-session cgroup, where this machine lets the harness make one (`_session_caps.py`).

Two layouts, probed once per process (`find_cgroups`):
- cgroup v2 (the unified hierarchy at /sys/fs/cgroup): a child of the harness's own cgroup, with
  `memory.max` (swap 0), `pids.max`, `cpu.max` and `memory.oom.group`; usable only where the
  memory and pids controllers are (or can be) enabled in the harness cgroup's `subtree_control`
  (the root of a host or a delegated systemd scope; not a container's busy root).
- cgroup v1 (one hierarchy per controller, e.g. /sys/fs/cgroup/memory): one directory per
  controller under the harness's own, with `memory.limit_in_bytes`, `pids.max` and the CFS quota.

A session joins its cgroup before bubblewrap starts (`join_argv`: a `sh` that writes its own pid
into each `cgroup.procs` and execs the command, no fork), so everything it starts is in it. A
breach is read from the kernel's counters: an OOM kill in the cgroup (`memory_breach`), or a
fork refused at `pids.max` (`pids_breach`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
_JOIN_SCRIPT = ('while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
                'exec "$@"')
_counter = itertools.count()


@dataclass(frozen=True)
class CgroupLayout:
    """Where session cgroups are made: `parents[controller]`, the harness's own cgroup dirs."""

    version: int  # 1 or 2
    parents: dict[str, Path]  # v2: {"unified": dir}; v1: {"memory": dir, "pids": dir, "cpu": dir}

    @property
    def controllers(self) -> tuple[str, ...]:
        if self.version == 2:
            return ("memory", "pids", "cpu")
        return tuple(self.parents)

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(self.controllers)})"

    def create(self, *, memory_bytes: int | None, pids: int | None, cpu: float | None,
               owner: int | None = None) -> SessionCgroup:
        """A fresh cgroup with these limits (OSError if the kernel refuses one)."""
        name = f"arl-session-{os.getpid()}-{next(_counter)}"
        dirs = {c: parent / name for c, parent in self.parents.items()}
        group = SessionCgroup(self.version, dirs)
        try:
            for path in dirs.values():
                path.mkdir()
            group.limit(memory_bytes=memory_bytes, pids=pids, cpu=cpu)
            if owner is not None:  # a uid session joins itself after dropping to its uid
                for path in group.procs_files():
                    os.chown(path, owner, owner)
        except OSError:
            group.remove()
            raise
        return group


class SessionCgroup:
    """One session's cgroup (one dir per v1 controller, or one v2 dir)."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs

    def _dir(self, controller: str) -> Path | None:
        return self.dirs.get("unified" if self.version == 2 else controller)

    def limit(self, *, memory_bytes: int | None, pids: int | None, cpu: float | None) -> None:
        memory, pid_dir, cpu_dir = self._dir("memory"), self._dir("pids"), self._dir("cpu")
        if self.version == 2:
            if memory_bytes is not None and memory is not None:
                _write(memory / "memory.max", memory_bytes)
                _write(memory / "memory.oom.group", 1, optional=True)
                _write(memory / "memory.swap.max", 0, optional=True)
            if pids is not None and pid_dir is not None:
                _write(pid_dir / "pids.max", pids)
            if cpu is not None and cpu_dir is not None:
                _write(cpu_dir / "cpu.max", f"{int(cpu * CPU_PERIOD_US)} {CPU_PERIOD_US}",
                       optional=True)
            return
        if memory_bytes is not None and memory is not None:
            _write(memory / "memory.limit_in_bytes", memory_bytes)
            _write(memory / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
        if pids is not None and pid_dir is not None:
            _write(pid_dir / "pids.max", pids)
        if cpu is not None and cpu_dir is not None:
            _write(cpu_dir / "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(cpu_dir / "cpu.cfs_quota_us", int(cpu * CPU_PERIOD_US))

    def procs_files(self) -> list[Path]:
        return [path / "cgroup.procs" for path in self.dirs.values()]

    def join_argv(self) -> list[str]:
        """The prefix that puts a command (and all it starts) into this cgroup, then execs it."""
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "arl-cgroup", *map(str, self.procs_files()), "--"]

    def memory_breach(self) -> str | None:
        """Why the memory cap was hit (an OOM kill inside the cgroup), or None."""
        memory = self._dir("memory")
        if memory is None:
            return None
        events = _counters(memory / ("memory.events" if self.version == 2 else "memory.oom_control"))
        if events.get("oom_kill", 0) > 0:
            peak = _read_int(memory / ("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"))
            peak_text = f", peak {peak // (1024 * 1024)} MB" if peak is not None else ""
            return f"the kernel killed {events['oom_kill']} of its processes (out of memory{peak_text})"
        return None

    def pids_breach(self) -> str | None:
        """Why the pids cap was hit (a fork or thread refused at pids.max), or None."""
        pids = self._dir("pids")
        if pids is None:
            return None
        refused = _counters(pids / "pids.events").get("max", 0)
        if refused > 0:
            return f"{refused} fork/clone call(s) refused at the limit"
        return None

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(line) for line in path.read_text().split())
        return found

    def kill(self) -> None:
        """SIGKILL everything in the cgroup (once; `remove` repeats until it is empty)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.dirs["unified"] / "cgroup.kill", 1)
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, wait_s: float = 2.0) -> str | None:
        """Kill what is left and remove the cgroup; why it could not be removed, or None."""
        deadline = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < deadline:
            self.kill()
            time.sleep(0.02)
        failed = []
        for path in self.dirs.values():
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                failed.append(f"{path}: {exc}")
        return "; ".join(failed) or None


def find_cgroups(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> CgroupLayout | str:
    """Where this process may make session cgroups, or why it may not (a sentence)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError as exc:
        return f"cannot read {self_cgroup}: {exc}"
    own: dict[str, str] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    if (root / "cgroup.controllers").exists():
        return _find_v2(root / own.get("", "/").lstrip("/"))
    parents = {}
    for controller in ("memory", "pids", "cpu"):
        mount = root / controller
        if controller not in own or not (mount / "cgroup.procs").exists():
            continue
        parent = mount / own[controller].lstrip("/")
        if _can_make_children(parent):
            parents[controller] = parent
    if "memory" in parents and "pids" in parents:
        return CgroupLayout(1, parents)
    return (f"no writable cgroup v1 memory and pids hierarchies under {root} (found: "
            f"{', '.join(parents) or 'none'})")


def _find_v2(parent: Path) -> CgroupLayout | str:
    wanted = {"memory", "pids", "cpu"}
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
    except OSError as exc:
        return f"cannot read the cgroup v2 controllers of {parent}: {exc}"
    missing = (wanted & available) - enabled
    if missing:
        try:
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))
        except OSError as exc:
            return (f"cannot enable {', '.join(sorted(missing))} for child cgroups of {parent} "
                    f"({exc}; the harness's cgroup is not delegated to it)")
        enabled |= missing
    if not {"memory", "pids"} <= enabled or not _can_make_children(parent):
        return f"cgroup v2 at {parent} has no writable memory and pids controllers for children"
    return CgroupLayout(2, {"unified": parent})


def _can_make_children(parent: Path) -> bool:
    probe = parent / f"arl-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    with contextlib.suppress(OSError):
        probe.rmdir()
    return True


def _write(path: Path, value: object, *, optional: bool = False) -> None:
    try:
        path.write_text(f"{value}\n")
    except OSError:
        if not optional:
            raise


def _read_int(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().split()[0])
    return None


def _counters(path: Path) -> dict[str, int]:
    """A flat-keyed file ("key value" lines) as a dict; {} if unreadable."""
    found = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                found[key] = int(value)
    return found
