"""The tracker seam: what a run tells an experiment tracker, and what a tracker is told about it.

A tracker module `<name>_tracker.py` defines `Config` (the frozen dataclass of its
`logger.<name>` node), `PACKAGES` (the modules it needs), `EXTRA` (what to pip install) and
`open_tracker(config=, run=)` returning a `Tracker`. Metrics arrive flat (`train/loss`, `post/overall/success_rate`),
numbers only. A tracker may raise anything: `run.tracking` turns a failure into a warning and
carries on without that tracker; the run's own files never depend on one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Set by `agentcore-rl sweep` for each job's pytest process: the sweep directory and job number.
SWEEP_DIR_ENV = "AGENTCORE_RL_SWEEP_DIR"
SWEEP_JOB_ENV = "AGENTCORE_RL_SWEEP_JOB"


@dataclass(frozen=True)
class SweepJob:
    """The sweep a run is one job of: trackers group its jobs under `name`."""

    dir: Path
    job: int

    @property
    def name(self) -> str:
        return self.dir.name

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> "SweepJob | None":
        sweep_dir = environ.get(SWEEP_DIR_ENV)
        if not sweep_dir:
            return None
        job = environ.get(SWEEP_JOB_ENV, "0")
        return cls(dir=Path(sweep_dir), job=int(job) if job.isdigit() else 0)


@dataclass(frozen=True)
class TrackedRun:
    """The run a tracker records."""

    run_id: str  # the run directory's name
    run_dir: Path
    mode: str  # eval, collect, train or run
    rootdir: Path  # the project (pytest's rootdir)
    sweep: SweepJob | None = None

    @property
    def display_name(self) -> str:
        return f"{self.sweep.name}-job-{self.sweep.job}" if self.sweep else self.run_id


class Tracker(Protocol):
    def log_config(self, *, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        """The composed config, once; `tags`: git sha, versions, run dir (strings)."""

    def log_step(self, *, step: int, metrics: Mapping[str, float]) -> None:
        """One trainer step's metrics (steps arrive in increasing order)."""

    def log_summary(self, *, step: int, metrics: Mapping[str, float]) -> None:
        """An eval phase's results (success, CIs, failures, pre/post/delta); may come twice."""

    def log_artifacts(self, *, paths: Sequence[Path], links: Mapping[str, str]) -> None:
        """The report files, and where the run directory is (links are shown, not uploaded)."""

    def finish(self, *, failed: bool) -> None:
        """Flush and close; `failed`: the run failed (an infrastructure error or a gate)."""
