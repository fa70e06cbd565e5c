"""How a root filesystem becomes bubblewrap's `/`: its top-level entries bound one by one onto
bubblewrap's own root (a tmpfs), so mount points can be made for host paths the root lacks and
`/proc`, `/dev`, `/tmp` need not exist in it. Used by the sessions (`runtimes/_rooted.py`) and
by the build's check of the environment's python3 (`building.py`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

_OWN_MOUNTS = frozenset({"proc", "dev", "sys", "tmp"})  # made by bubblewrap, never bound from the root


def root_mounts(root: Path, needed: Sequence[Path]) -> list[str]:
    """bubblewrap arguments making `root` the session's `/` with mount points for `needed`."""
    args: list[str] = []
    wanted = [PurePosixPath(p) for p in needed]

    def lay(directory: PurePosixPath) -> None:
        source = root / directory.relative_to("/")
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            inside = directory / entry.name
            if directory == PurePosixPath("/") and entry.name in _OWN_MOUNTS:
                continue
            if entry.is_symlink():
                args.extend(["--symlink", os.readlink(entry.path), str(inside)])
            elif entry.is_dir() and any(_lacks(root, w, inside) for w in wanted):
                args.extend(["--dir", str(inside)])
                lay(inside)
            else:
                args.extend(["--ro-bind", entry.path, str(inside)])

    lay(PurePosixPath("/"))
    return args


def _lacks(root: Path, wanted: PurePosixPath, inside: PurePosixPath) -> bool:
    """`wanted` lies under `inside` and has no mount point in the environment yet."""
    return wanted.is_relative_to(inside) and wanted != inside and \
        not os.path.lexists(root / wanted.relative_to("/"))
