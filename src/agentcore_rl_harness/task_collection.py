"""Tasks pytest would not collect: say so, with the naming rule, instead of "collected 0 items".

pytest collects files that match `python_files` (test_*.py, *_test.py) and, in them, functions
that match `python_functions` (test*). An `@arl.task` outside either is silently skipped by
pytest; these helpers turn that into a message that names the file or function and its fix.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

TASK_MARKERS = ("@arl.task", "arl.task(", "@task(")
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "outputs", ".tox", "site-packages"}
_SCAN_LIMIT = 2000  # files looked at, at most (a huge tree must not slow the message down)


def uncollected_function_message(name: str, module: str, python_functions: Sequence[str]) -> str:
    rule = " or ".join(f"{pattern}*" for pattern in python_functions)
    return (f"{name} in {module} is an @arl.task, but pytest collects only functions named "
            f"{rule} (ini python_functions): rename it to test_{name}")


def file_is_collected(path: Path, python_files: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(path.name, pattern) for pattern in python_files)


def uncollected_task_files(roots: Iterable[Path], python_files: Sequence[str]) -> list[Path]:
    """Python files under `roots` that declare a task but whose name pytest does not collect."""
    found, seen = [], 0
    for root in roots:
        paths = [root] if root.is_file() else _walk(root)
        for path in paths:
            seen += 1
            if seen > _SCAN_LIMIT:
                return found
            if path.suffix != ".py" or file_is_collected(path, python_files):
                continue
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if any(marker in text for marker in TASK_MARKERS):
                found.append(path)
    return found


def _walk(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            yield Path(folder) / name


def no_tasks_message(mode: str, roots: Sequence[Path], python_files: Sequence[str],
                     python_functions: Sequence[str]) -> list[str]:
    """What `--agentcore-rl MODE` says when it collected no task: where it looked, the rule, and
    any file that declares a task under a name pytest skips."""
    where = ", ".join(str(root) for root in roots)
    lines = [
        f"agentcore-rl {mode}: collected 0 tasks (looked in {where}).",
        f"  pytest collects task files named {' or '.join(python_files)} (ini python_files) and, in "
        f"them, functions named {' or '.join(p + '*' for p in python_functions)} (ini "
        "python_functions): a task is e.g. `def test_shop(rollout, row)` in `test_shop.py`.",
    ]
    for path in uncollected_task_files(roots, python_files):
        lines.append(f"  {path} declares an @arl.task but its name does not match: rename it to "
                     f"test_{path.stem}.py")
    return lines
