"""The run directory: resolved config, append-only rollouts.jsonl, and reading it back."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from .errors import HarnessError
from .records import Rollout

ROLLOUTS = "rollouts.jsonl"
DISCARDED = "rollouts.discarded.jsonl"
RUN_INFO = "run.json"


def default_run_dir(mode: str, base: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return base / "outputs" / f"{stamp}-{mode}"


class RunStore:
    """One run directory. `append` is thread-safe and flushes each record before returning."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir).resolve()
        self._lock = threading.Lock()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HarnessError(f"cannot create run directory {self.run_dir}: {exc}") from exc
        _drop_torn_tail(self.run_dir / ROLLOUTS)
        self._file = open(self.run_dir / ROLLOUTS, "a", encoding="utf-8")

    def write_config(self, resolved: dict[str, Any]) -> None:
        text = yaml.safe_dump(resolved, sort_keys=False)
        (self.run_dir / "config.yaml").write_text(text, encoding="utf-8")

    def write_run_info(self, info: dict[str, Any]) -> None:
        (self.run_dir / RUN_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")

    def read_run_info(self) -> dict[str, Any]:
        path = self.run_dir / RUN_INFO
        if not path.is_file():
            raise HarnessError(f"{path} is missing: {self.run_dir} is not a resumable run directory")
        return json.loads(path.read_text(encoding="utf-8"))

    def rewrite(self, keep: list[Rollout], discard: list[Rollout]) -> None:
        """Replace rollouts.jsonl by `keep`; `discard` goes to rollouts.discarded.jsonl."""
        with self._lock:
            self._file.close()
            if discard:
                with open(self.run_dir / DISCARDED, "a", encoding="utf-8") as handle:
                    for rollout in discard:
                        handle.write(json.dumps(rollout.to_json(), ensure_ascii=False) + "\n")
            temporary = self.run_dir / (ROLLOUTS + ".tmp")
            with open(temporary, "w", encoding="utf-8") as handle:
                for rollout in keep:
                    handle.write(json.dumps(rollout.to_json(), ensure_ascii=False) + "\n")
            os.replace(temporary, self.run_dir / ROLLOUTS)
            self._file = open(self.run_dir / ROLLOUTS, "a", encoding="utf-8")

    def append(self, rollout: Rollout) -> None:
        line = json.dumps(rollout.to_json(), ensure_ascii=False, allow_nan=False)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut an unterminated last line (a write a kill cut off), so appends start a fresh line."""
    if not path.is_file():
        return
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        data = handle.seek(0) or handle.read()
        handle.truncate(data.rfind(b"\n") + 1)


def read_rollouts(run_dir: Path) -> list[Rollout]:
    """All complete records; a torn last line (a killed run) is ignored, corrupt lines raise."""
    path = Path(run_dir) / ROLLOUTS
    if not path.is_file():
        raise HarnessError(f"{path} does not exist; is {run_dir} a run directory?")
    lines = path.read_text(encoding="utf-8").split("\n")
    rollouts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rollouts.append(Rollout.from_json(json.loads(line)))
        except (ValueError, KeyError) as exc:
            if number == len(lines):  # an unterminated final line: the write was cut off
                break
            raise HarnessError(f"{path}:{number}: not a rollout record: {exc}") from exc
    return rollouts
