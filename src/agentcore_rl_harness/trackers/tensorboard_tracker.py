"""`logger=tensorboard`: TensorBoard event files, through torch's `SummaryWriter`.

The log dir is `<run dir>/tensorboard`, or `logger.tensorboard.log_dir` (a sweep job then writes
to `<log_dir>/<sweep>/job-<n>`), so `tensorboard --logdir <sweep dir>` (or that log_dir) shows
every job of a sweep side by side. The config and the report files' paths are text summaries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import TrackedRun

PACKAGES = ("tensorboard", "torch")  # torch.utils.tensorboard writes the events; torch comes with [local]
EXTRA = "tensorboard"


@dataclass(frozen=True)
class Config:
    log_dir: str | None = None  # null: <run dir>/tensorboard
    flush_secs: int = 30  # how often the event file is written to disk


def log_dir(config: Config, run: TrackedRun) -> Path:
    if config.log_dir is None:
        return run.run_dir / "tensorboard"
    base = Path(config.log_dir)
    if not base.is_absolute():
        base = run.rootdir / base
    return base / run.sweep.name / f"job-{run.sweep.job}" if run.sweep else base / run.run_id


class TensorBoardTracker:
    def __init__(self, config: Config, run: TrackedRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir(config, run)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=config.flush_secs)

    def log_config(self, *, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        self._writer.add_text("config", _code(json.dumps(config, indent=2, default=str)), 0)
        self._writer.add_text("run", _code(json.dumps(dict(tags), indent=2)), 0)

    def log_step(self, *, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)

    def log_summary(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self.log_step(step=step, metrics=metrics)
        self._writer.flush()

    def log_artifacts(self, *, paths: Sequence[Path], links: Mapping[str, str]) -> None:
        lines = [*(f"{key}: {value}" for key, value in links.items()), *(str(path) for path in paths)]
        self._writer.add_text("artifacts", _code("\n".join(lines)), 0)

    def finish(self, *, failed: bool) -> None:
        self._writer.close()


def _code(text: str) -> str:
    """TensorBoard renders text as markdown: indent it into a code block."""
    return "\n".join("    " + line for line in text.splitlines())


def open_tracker(*, config: Config, run: TrackedRun) -> TensorBoardTracker:
    return TensorBoardTracker(config, run)
