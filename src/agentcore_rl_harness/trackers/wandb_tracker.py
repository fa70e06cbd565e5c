"""`logger=wandb`: Weights & Biases, offline unless a key is in the environment.

The run's files go to `<run dir>/wandb/` (`wandb sync` uploads an offline run later). A sweep's
jobs share the W&B group named after the sweep directory. The API key is W&B's own business:
`WANDB_API_KEY` or `wandb login`, never the config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import TrackedRun

PACKAGES = ("wandb",)
EXTRA = "wandb"
MODES = ("online", "offline", "disabled")


@dataclass(frozen=True)
class Config:
    project: str = "agentcore-rl"  # the W&B project runs go to
    entity: str | None = None  # a team; null: the key's default entity
    mode: str | None = None  # online / offline / disabled; null: $WANDB_MODE, else online with a key
    dir: str | None = None  # where wandb/ is written; null: the run directory
    group: str | None = None  # null: the sweep's name under `agentcore-rl sweep`, else none
    name: str | None = None  # null: the run id (a sweep job: <sweep>-job-<n>)
    tags: tuple[str, ...] = ()  # extra tags on each W&B run

    def validate(self) -> None:
        if self.mode is not None:
            choose_mode(self.mode)


def choose_mode(configured: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """offline unless asked otherwise or a key is present: a run never needs the network."""
    mode = configured or environ.get("WANDB_MODE") or ("online" if environ.get("WANDB_API_KEY") else "offline")
    if mode == "dryrun":
        mode = "offline"
    if mode not in MODES:
        from ..errors import ConfigError

        raise ConfigError(f"logger.wandb.mode={mode!r} is not supported; valid choices: {list(MODES)}")
    return mode


class WandbTracker:
    def __init__(self, config: Config, run: TrackedRun) -> None:
        import wandb

        self._wandb = wandb
        self._run = wandb.init(
            project=config.project, entity=config.entity, mode=choose_mode(config.mode),
            dir=str(config.dir or run.run_dir), name=config.name or run.display_name,
            group=config.group or (run.sweep.name if run.sweep else None), job_type=run.mode,
            tags=list(config.tags) or None, reinit="create_new",
            settings=wandb.Settings(console="off", save_code=False, disable_git=True,
                                    x_disable_stats=True, silent=True),
        )

    def log_config(self, *, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        self._run.config.update({**config, "agentcore_rl": dict(tags)}, allow_val_change=True)

    def log_step(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def log_summary(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._run.summary.update(dict(metrics))

    def log_artifacts(self, *, paths: Sequence[Path], links: Mapping[str, str]) -> None:
        self._run.summary.update(dict(links))
        if paths:
            artifact = self._wandb.Artifact(f"report-{self._run.id}", type="report")
            for path in paths:
                artifact.add_file(str(path))
            self._run.log_artifact(artifact)

    def finish(self, *, failed: bool) -> None:
        self._run.finish(exit_code=1 if failed else 0)


def open_tracker(*, config: Config, run: TrackedRun) -> WandbTracker:
    return WandbTracker(config, run)
