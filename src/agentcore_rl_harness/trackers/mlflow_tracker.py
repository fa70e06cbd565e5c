"""`logger=mlflow`: MLflow through `MlflowClient`, a local file store unless told otherwise.

The store is `logger.mlflow.tracking_uri`, else `$MLFLOW_TRACKING_URI`, else `<project>/mlruns`
(a file store; MLflow 3 wants `MLFLOW_ALLOW_FILE_STORE=true` for one, which is set for this
process when unset). Credentials stay in MLflow's own environment variables
(`MLFLOW_TRACKING_TOKEN`, `..._USERNAME` / `..._PASSWORD`); a URI carrying them is refused. A
sweep's jobs are nested runs under one parent run named after the sweep (created by the first
job, under a file lock, and recorded in `<sweep dir>/mlflow_parent.json`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .base import SweepJob, TrackedRun

PACKAGES = ("mlflow",)
EXTRA = "mlflow"
PARENT_FILE = "mlflow_parent.json"
BATCH = 100  # MLflow's log_batch limit for params (metrics allow 1000)
MAX_PARAM_CHARS = 6000


@dataclass(frozen=True)
class Config:
    tracking_uri: str | None = None  # null: $MLFLOW_TRACKING_URI, else file:<project>/mlruns
    experiment: str = "agentcore-rl"  # the MLflow experiment runs go to (made if missing)
    run_name: str | None = None  # null: the run id (a sweep job: <sweep>-job-<n>)
    tags: dict[str, str] = field(default_factory=dict)  # extra tags on each MLflow run

    def validate(self) -> None:
        if self.tracking_uri and "@" in (urlsplit(self.tracking_uri).netloc or ""):
            from ..errors import ConfigError

            raise ConfigError(
                "logger.mlflow.tracking_uri carries credentials (user:password@host), which would "
                "be written to the run's config.yaml; drop them and set MLFLOW_TRACKING_USERNAME / "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment"
            )


def tracking_uri(config: Config, rootdir: Path, environ: Mapping[str, str] = os.environ) -> str:
    return config.tracking_uri or environ.get("MLFLOW_TRACKING_URI") or (Path(rootdir) / "mlruns").resolve().as_uri()


def metric_key(key: str) -> str:
    """MLflow keys allow letters, digits, `_ - . / ` and spaces: anything else becomes `_`."""
    return re.sub(r"[^\w\-./ ]", "_", key)


def flat_params(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flat_params(value, f"{name}.")
        else:
            yield metric_key(name), json.dumps(value, default=str)[:MAX_PARAM_CHARS]


class MlflowTracker:
    def __init__(self, config: Config, run: TrackedRun) -> None:
        from mlflow.tracking import MlflowClient

        uri = tracking_uri(config, run.rootdir)
        if urlsplit(uri).scheme in ("", "file"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = MlflowClient(tracking_uri=uri)
        existing = self._client.get_experiment_by_name(config.experiment)
        experiment_id = existing.experiment_id if existing else self._client.create_experiment(config.experiment)
        tags = {"agentcore_rl.mode": run.mode, "agentcore_rl.run_id": run.run_id, **config.tags}
        self._parent = None
        if run.sweep is not None:
            self._parent = _parent_run(self._client, experiment_id, run.sweep)
            tags.update({"mlflow.parentRunId": self._parent, "agentcore_rl.sweep": run.sweep.name})
        self.run_id = self._client.create_run(
            experiment_id, run_name=config.run_name or run.display_name, tags=tags,
        ).info.run_id

    def log_config(self, *, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        params = [Param(key, value) for key, value in flat_params(config)]
        for start in range(0, len(params), BATCH):
            self._client.log_batch(self.run_id, params=params[start:start + BATCH])
        self._client.log_batch(self.run_id, tags=[RunTag(f"agentcore_rl.{k}", v) for k, v in tags.items()])
        if tags.get("git_sha"):
            self._client.set_tag(self.run_id, "mlflow.source.git.commit", tags["git_sha"])
        self._client.log_dict(self.run_id, dict(config), "config.yaml")

    def log_step(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._metrics(step, metrics)

    def log_summary(self, *, step: int, metrics: Mapping[str, float]) -> None:
        self._metrics(step, metrics)

    def _metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_key(key), float(value), now, step) for key, value in metrics.items()]
        for start in range(0, len(batch), 1000):
            self._client.log_batch(self.run_id, metrics=batch[start:start + 1000])

    def log_artifacts(self, *, paths: Sequence[Path], links: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        self._client.log_batch(self.run_id, tags=[RunTag(f"agentcore_rl.{k}", v) for k, v in links.items()])
        for path in paths:
            self._client.log_artifact(self.run_id, str(path))

    def finish(self, *, failed: bool) -> None:
        self._client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
        if self._parent is not None:  # the last job to finish leaves the parent finished
            self._client.set_terminated(self._parent, "FINISHED")


def _parent_run(client: Any, experiment_id: str, sweep: SweepJob) -> str:
    """The sweep's parent run id: made by the first job, found by the others (parallel jobs too)."""
    sweep.dir.mkdir(parents=True, exist_ok=True)
    record = sweep.dir / PARENT_FILE
    with open(sweep.dir / f".{PARENT_FILE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            known = json.loads(record.read_text(encoding="utf-8"))
            if known.get("experiment_id") == experiment_id:
                client.update_run(known["run_id"], status="RUNNING")
                return known["run_id"]
        parent = client.create_run(experiment_id, run_name=sweep.name,
                                   tags={"agentcore_rl.sweep": sweep.name, "agentcore_rl.sweep_dir": str(sweep.dir)})
        record.write_text(json.dumps({"experiment_id": experiment_id, "run_id": parent.info.run_id}),
                          encoding="utf-8")
        return parent.info.run_id


def open_tracker(*, config: Config, run: TrackedRun) -> MlflowTracker:
    return MlflowTracker(config, run)
