"""What a killed harness left behind, removed at the next start.

SIGKILL runs no atexit handler, so a harness killed mid-run leaves its session cgroups
(`arl-session-<pid>-N`, made by `_cgroups.SessionCgroup.create`) and the tmpfs mounted on its
session dirs (`arl-<pid>-<random>`, made by `LocalRuntime`). Both names carry the harness pid;
whatever belongs to a pid that is no longer alive is removed, once per process, when the first
`SessionCaps` that uses real cgroups or mounts is made. Another harness still running keeps its
own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from ._cgroups import CgroupLayout

logger = logging.getLogger(__name__)

MNT_DETACH = 2
_OWNED = re.compile(r"^arl-(?:session-)?(\d+)-")
_SWEPT: list[bool] = []


def sweep_once(layout: CgroupLayout | None, libc: Any) -> None:
    """Sweep stale session cgroups and tmpfs the first time this process asks; log what went."""
    if _SWEPT:
        return
    _SWEPT.append(True)
    cgroups = sweep_stale(layout) if layout is not None else 0
    mounts = sweep_stale_mounts(libc)
    if cgroups or mounts:
        logger.info("removed what a killed harness left: %d session cgroups, %d session tmpfs",
                    cgroups, mounts)


def sweep_stale(layout: CgroupLayout) -> int:
    """Remove the session cgroups whose harness pid is gone (their processes are killed first).
    Returns how many were removed."""
    removed = 0
    for parent in layout.parents.values():
        with contextlib.suppress(OSError):
            for path in parent.glob("arl-session-*-*"):
                if not path.is_dir() or pid_alive(owner_pid(path.name)):
                    continue
                with contextlib.suppress(OSError):
                    for line in (path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError, ValueError):
                            os.kill(int(line), signal.SIGKILL)
                for _ in range(20):
                    try:
                        path.rmdir()
                        removed += 1
                        break
                    except OSError:
                        time.sleep(0.05)
    return removed


def sweep_stale_mounts(libc: Any, mounts: Path = Path("/proc/self/mounts")) -> int:
    """Unmount the tmpfs of session dirs whose harness is gone, and remove the dirs. Returns
    how many were removed (0 without root or libc)."""
    if libc is None or os.geteuid() != 0:
        return 0
    removed = 0
    with contextlib.suppress(OSError):
        for line in mounts.read_text().splitlines():
            fields = line.split()
            if len(fields) < 3 or fields[2] != "tmpfs":
                continue
            path = Path(fields[1].replace("\\040", " "))
            if owner_pid(path.name) is None or pid_alive(owner_pid(path.name)):
                continue
            if libc.umount2(str(path).encode(), MNT_DETACH) == 0:
                removed += 1
                shutil.rmtree(path, ignore_errors=True)
    return removed


def owner_pid(name: str) -> int | None:
    """The harness pid in a session cgroup or session dir name; None for any other name."""
    match = _OWNED.match(name)
    return int(match.group(1)) if match else None


def pid_alive(pid: int | None) -> bool:
    if pid is None:
        return True  # not ours to judge: keep it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
