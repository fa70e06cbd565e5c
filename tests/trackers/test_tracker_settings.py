"""Each tracker's own settings: where it writes, which mode W&B takes, MLflow's keys and store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.trackers import mlflow_tracker, tensorboard_tracker, wandb_tracker
from agentcore_rl_harness.trackers.base import SWEEP_DIR_ENV, SWEEP_JOB_ENV, SweepJob, TrackedRun


def _run(tmp_path, sweep=None):
    return TrackedRun(run_id="20261201T000000Z-run", run_dir=tmp_path / "out", mode="run", rootdir=tmp_path,
                      sweep=sweep)


@pytest.mark.parametrize("configured, environ, mode", [
    (None, {}, "offline"),  # no key, no network needed
    (None, {"WANDB_API_KEY": "k"}, "online"),
    (None, {"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
    (None, {"WANDB_MODE": "dryrun"}, "offline"),
    ("disabled", {"WANDB_API_KEY": "k"}, "disabled"),
])
def test_wandb_is_offline_unless_a_key_or_a_mode_says_otherwise(configured, environ, mode):
    assert wandb_tracker.choose_mode(configured, environ) == mode


def test_a_bad_wandb_mode_from_the_environment_is_named():
    with pytest.raises(ConfigError, match="valid choices: \\['online', 'offline', 'disabled'\\]"):
        wandb_tracker.choose_mode(None, {"WANDB_MODE": "shared-drive"})


def test_tensorboard_writes_into_the_run_dir_or_one_dir_per_run_and_sweep_job(tmp_path):
    config = tensorboard_tracker.Config
    assert tensorboard_tracker.log_dir(config(), _run(tmp_path)) == tmp_path / "out" / "tensorboard"
    assert tensorboard_tracker.log_dir(config(log_dir="tb"), _run(tmp_path)) == tmp_path / "tb" / "20261201T000000Z-run"
    sweep = SweepJob(dir=tmp_path / "sweeps" / "s1", job=3)
    assert tensorboard_tracker.log_dir(config(log_dir="/abs/tb"), _run(tmp_path, sweep)) == Path("/abs/tb/s1/job-3")


def test_mlflow_store_precedence_and_key_cleaning(tmp_path):
    config = mlflow_tracker.Config
    assert mlflow_tracker.tracking_uri(config(), tmp_path, {}) == (tmp_path / "mlruns").resolve().as_uri()
    assert mlflow_tracker.tracking_uri(config(), tmp_path, {"MLFLOW_TRACKING_URI": "http://h:5000"}) == "http://h:5000"
    assert mlflow_tracker.tracking_uri(config(tracking_uri="sqlite:///x.db"), tmp_path,
                                       {"MLFLOW_TRACKING_URI": "http://h:5000"}) == "sqlite:///x.db"
    assert mlflow_tracker.metric_key("post/task/tests/test_a.py::test_b/pass_at/1") == \
        "post/task/tests/test_a.py__test_b/pass_at/1"
    assert dict(mlflow_tracker.flat_params({"a": {"b": 1, "c": [1, 2]}, "d": None, "e": {}})) == {
        "a.b": "1", "a.c": "[1, 2]", "d": "null", "e": "{}"}


def test_a_sweep_job_is_read_from_the_environment_the_sweep_sets(tmp_path):
    assert SweepJob.from_environ({}) is None
    job = SweepJob.from_environ({SWEEP_DIR_ENV: str(tmp_path / "lr"), SWEEP_JOB_ENV: "2"})
    assert (job.name, job.job) == ("lr", 2)
    assert _run(tmp_path, job).display_name == "lr-job-2"
