"""The run directories a viewer shows: found under the paths it was given, read in place.

A path is a run directory (it has rollouts.jsonl or run.json), or a folder holding some (an
`outputs/` folder, a sweep's folder): those are found up to `SCAN_DEPTH` levels down, again on
every listing, so a run that starts while the viewer is open appears. Each run gets a URL key,
its directory's name (report.html links by it), made unique with a suffix when two clash.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import HarnessError
from ..reports.tokenizer import model_name
from ..store import read_json_lines
from ..train_store import steps_path
from .index import ROLLOUTS, RunIndex
from .links import run_key

SCAN_DEPTH = 3
MARKERS = (ROLLOUTS, "run.json")
LIVE_WINDOW_S = 120.0  # a run whose rollouts.jsonl changed this recently and has no report yet


def _is_run(path: Path) -> bool:
    return any((path / marker).is_file() for marker in MARKERS)


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Every run directory at or under `paths` (sorted per path); a path with none is an error."""
    found: list[Path] = []
    for path in paths:
        path = Path(path).expanduser().resolve()
        if not path.is_dir():
            raise HarnessError(f"{path}: no such directory; give a run directory (with {ROLLOUTS}) "
                               "or a folder of them such as outputs/")
        if _is_run(path):
            found.append(path)
            continue
        runs = sorted(_scan(path, SCAN_DEPTH))
        if not runs:
            raise HarnessError(f"{path}: no run directory here or {SCAN_DEPTH} levels below (none "
                               f"has {ROLLOUTS} or run.json)")
        found += runs
    return found


def _scan(folder: Path, depth: int) -> list[Path]:
    if depth == 0:
        return []
    runs = []
    try:
        children = [child for child in folder.iterdir() if child.is_dir() and not child.is_symlink()]
    except OSError:
        return []
    for child in children:
        runs += [child] if _is_run(child) else _scan(child, depth - 1)
    return runs


@dataclass
class Run:
    """One run directory and its index (built on first use, extended on each refresh)."""

    key: str
    run_dir: Path
    index: RunIndex = field(init=False)

    def __post_init__(self) -> None:
        self.index = RunIndex(self.run_dir)

    def mode(self) -> str:
        info = _json_file(self.run_dir / "run.json")
        return str(info.get("mode", "")) if info else ""

    def config(self) -> dict[str, Any]:
        path = self.run_dir / "config.yaml"
        if not path.is_file():
            return {}
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise HarnessError(f"{path}: not readable YAML ({exc})") from exc
        return loaded if isinstance(loaded, dict) else {}

    def config_text(self) -> str:
        path = self.run_dir / "config.yaml"
        return path.read_text(encoding="utf-8") if path.is_file() else ""

    def report(self) -> dict[str, Any] | None:
        """report.json when the run wrote one (it has the paired deltas and their p-values)."""
        return _json_file(self.run_dir / "report.json")

    def steps(self) -> list[dict[str, Any]]:
        """train/steps.jsonl as written so far (a step line being written right now is skipped)."""
        return read_json_lines(steps_path(self.run_dir))

    def live(self) -> bool:
        """Still running, as far as the directory tells: no report.json yet and rollouts.jsonl
        (or run.json) changed within `LIVE_WINDOW_S`."""
        if (self.run_dir / "report.json").is_file():
            return False
        stamps = [(self.run_dir / name).stat().st_mtime for name in MARKERS
                  if (self.run_dir / name).is_file()]
        return bool(stamps) and time.time() - max(stamps) < LIVE_WINDOW_S

    def model_name(self) -> str | None:
        return model_name(self.config())


def _json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # being written; the next refresh reads it
    return loaded if isinstance(loaded, dict) else None


class Catalog:
    """The runs under the viewer's paths, by key. Rescans on `runs()`; keys never change."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = [Path(path) for path in paths]
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._keys: dict[Path, str] = {}
        self.runs()  # a bad path fails now, not on the first request

    def runs(self) -> list[Run]:
        found = find_run_dirs(self.paths)
        with self._lock:
            for run_dir in found:
                if run_dir not in self._keys:
                    key = _unique(run_key(run_dir.name), self._runs)
                    self._keys[run_dir] = key
                    self._runs[key] = Run(key, run_dir)
            return [self._runs[self._keys[run_dir]] for run_dir in found]

    def get(self, key: str) -> Run:
        with self._lock:
            run = self._runs.get(key)
        if run is None:
            self.runs()
            with self._lock:
                run = self._runs.get(key)
        if run is None:
            raise KeyError(key)
        return run


def _unique(key: str, taken: dict[str, Run]) -> str:
    candidate, number = key, 2
    while candidate in taken:
        candidate, number = f"{key}-{number}", number + 1
    return candidate
