"""A session's final files, kept after it ends: packed as a gzip tar, bounded, and unpacked safely.

Packed from the host side after the session's processes are dead: symlinks are stored as links
(never followed), sockets and devices skipped. Unpacked with tarfile's `data` filter, so no
member can land outside the target directory or carry a device node or setuid bit.
"""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

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
