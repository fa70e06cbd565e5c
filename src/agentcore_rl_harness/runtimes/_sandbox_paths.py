"""The paths a bubblewrap session must not see, and those bound back into it (`isolation.py`)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


def default_hidden(base_dir: Path | None) -> tuple[Path, ...]:
    """What no session may see: where sessions live, the harness user's home, shared temp dirs."""
    candidates = [Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"),
                  Path.home(), Path("/root")]
    if base_dir is not None:
        candidates.append(base_dir)
    return tuple(dict.fromkeys(p.resolve() for p in candidates if p.exists()))


def python_paths() -> tuple[Path, ...]:
    """What an agent's interpreter must read: the installation and every import path."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += [p for p in sys.path if p]
    paths += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return tuple(dict.fromkeys(Path(p).resolve() for p in paths if os.path.exists(p)))


def hidden_roots(hidden: Sequence[Path], workdir: Path) -> list[Path]:
    """Hidden paths outermost first; a path inside another hidden one is covered already."""
    roots: list[Path] = []
    for path in sorted(set(hidden), key=lambda p: len(p.parts)):
        if path == Path("/") or not path.is_dir() or any(path.is_relative_to(root) for root in roots):
            continue
        roots.append(path)
    return roots


def rebinds(hidden: Sequence[Path], workdir: Path, readable: Iterable[Path]) -> list[Path]:
    """Readable paths under a hidden one, bound back; never one that would uncover other sessions."""
    roots = hidden_roots(hidden, workdir)
    chosen: list[Path] = []
    for path in dict.fromkeys(readable):
        if not path.exists() or not any(path.is_relative_to(root) for root in roots):
            continue
        if workdir.parent.is_relative_to(path) or any(root.is_relative_to(path) for root in roots):
            logger.debug("not binding %s into the session sandbox: it would uncover %s", path,
                           workdir.parent)
            continue
        chosen.append(path)
    chosen.sort(key=lambda p: len(p.parts))
    return [p for i, p in enumerate(chosen) if not any(p.is_relative_to(q) for q in chosen[:i])]
