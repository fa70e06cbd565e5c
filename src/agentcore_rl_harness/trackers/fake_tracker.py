"""A tracker for tests (the seam's shipped fake): records every call as a JSON line, and fails
on request. Not a `logger=` choice (no conf/logger/fake.yaml); select it with
`+logger.fake.record=PATH` and make it raise with `+logger.fake.fail_on=[log_step]`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import TrackedRun

PACKAGES: tuple[str, ...] = ()
EXTRA = "test"
CALLS = ("open", "log_config", "log_step", "log_summary", "log_artifacts", "finish")


@dataclass(frozen=True)
class Config:
    record: str | None = None  # a JSONL file the calls are appended to
    fail_on: tuple[str, ...] = ()  # calls that raise (of CALLS)

    def validate(self) -> None:
        unknown = [call for call in self.fail_on if call not in CALLS]
        if unknown:
            from ..errors import ConfigError

            raise ConfigError(f"logger.fake.fail_on: unknown call(s) {unknown}; valid: {list(CALLS)}")


class FakeTrackerError(RuntimeError):
    pass


class FakeTracker:
    def __init__(self, config: Config, run: TrackedRun) -> None:
        self._config = config
        self._call("open", run_id=run.run_id, run_dir=str(run.run_dir), mode=run.mode,
                   sweep=None if run.sweep is None else {"name": run.sweep.name, "job": run.sweep.job})

    def _call(self, call: str, **fields: Any) -> None:
        if self._config.record:
            with open(self._config.record, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"call": call, **fields}, default=str) + "\n")
        if call in self._config.fail_on:
            raise FakeTrackerError(f"{call} failed on purpose (logger.fake.fail_on)")

    def log_config(self, *, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        self._call("log_config", config=dict(config), tags=dict(tags))

    def log_step(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._call("log_step", step=step, metrics=dict(metrics))

    def log_summary(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._call("log_summary", step=step, metrics=dict(metrics))

    def log_artifacts(self, *, paths: Sequence[Path], links: Mapping[str, str]) -> None:
        self._call("log_artifacts", paths=[str(p) for p in paths], links=dict(links))

    def finish(self, *, failed: bool) -> None:
        self._call("finish", failed=failed)


def open_tracker(*, config: Config, run: TrackedRun) -> FakeTracker:
    return FakeTracker(config, run)


def read_calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
