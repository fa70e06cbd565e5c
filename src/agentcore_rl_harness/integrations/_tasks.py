"""Finding a task outside pytest: by reference `path/to/test_file.py::test_name`, or by name.

External trainers (verl, slime) run in their own processes, without pytest collecting anything,
so the exported dataset carries each row's task reference and the rollout code imports the task
file the way pytest's `prepend` import mode would (its folder first on `sys.path`).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
from pathlib import Path

from ..errors import ConfigError
from ..tasks import TaskSpec, task_spec

TEST_FILE_GLOBS = ("test_*.py", "*_test.py")
_lock = threading.Lock()
_loaded: dict[str, TaskSpec] = {}


def task_ref(spec: TaskSpec) -> str:
    """The reference that finds `spec` again: `<absolute file>::<function name>`."""
    return f"{Path(inspect.getfile(spec.fn)).resolve()}::{spec.fn.__name__}"


def load_task(ref: str) -> TaskSpec:
    """The task at `ref` (`file.py::function`), imported once per process."""
    with _lock:
        if ref in _loaded:
            return _loaded[ref]
        path_text, sep, function = ref.partition("::")
        if not sep or not function:
            raise ConfigError(f"task reference {ref!r} must look like path/to/test_file.py::test_name")
        module = _import_file(Path(path_text))
        spec = task_spec(getattr(module, function, None))
        if spec is None:
            raise ConfigError(f"{path_text} has no @arl.task function named {function!r}")
        _loaded[ref] = spec
        return spec


def find_task(name: str, *, root: Path) -> TaskSpec:
    """The task called `name` (or a `file.py::function` reference) among the test files under `root`."""
    if "::" in name:
        path_text, _, function = name.partition("::")
        path = Path(path_text)
        return load_task(f"{(path if path.is_absolute() else root / path).resolve()}::{function}")
    found, failed = tasks_under(root)
    if name not in found:
        raise ConfigError(
            f"no task named {name!r} in the test files under {root}; tasks found: "
            f"{sorted(found) or 'none'} (pass --root DIR, or --task path/to/test_file.py::test_name)"
            + "".join(f"\n  could not import: {message}" for message in failed)
        )
    return found[name]


def tasks_under(root: Path) -> tuple[dict[str, TaskSpec], list[str]]:
    """Every task in the test files under `root` (a folder, or one test file), by name, and the
    files that failed to import (their errors)."""
    found: dict[str, TaskSpec] = {}
    failed: list[str] = []
    for path in _test_files(root):
        if ".task" not in path.read_text(encoding="utf-8", errors="replace"):
            continue  # no task decorator in it: ordinary tests are not imported
        try:
            module = _import_file(path)
        except ConfigError as exc:  # a broken file only matters if the task was in it
            failed.append(str(exc))
            continue
        for value in vars(module).values():
            spec = task_spec(value)
            if spec is not None:
                found.setdefault(spec.name, spec)
    return found, failed


def _test_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    files: set[Path] = set()
    for pattern in TEST_FILE_GLOBS:
        files.update(p for p in root.rglob(pattern) if not any(part.startswith(".") for part in p.parts))
    return sorted(files)


def _import_file(path: Path):
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(f"task file {path} does not exist")
    name = "agentcore_rl_task_" + "_".join(path.with_suffix("").parts[-3:]).replace("-", "_")
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import task file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's module failed to import: say which file
        del sys.modules[name]
        raise ConfigError(f"importing task file {path} failed: {type(exc).__name__}: {exc}") from exc
    return module
