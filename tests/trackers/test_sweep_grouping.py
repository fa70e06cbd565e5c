"""`agentcore-rl sweep -m` with every tracker: the jobs of one sweep share a W&B group, are nested
runs under one MLflow parent run, and each has its own TensorBoard log dir in the sweep dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from readers import read_tensorboard, read_wandb_run
from toy_project import AGENT

pytestmark = pytest.mark.slow

TASK = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2)
def test_toy(rollout, row):
    rollout.reward = float(len(rollout.result["reply"]) % 2 == 0)
    assert rollout.reward == 1.0
'''


def test_a_sweep_groups_its_jobs_in_every_tracker(tmp_path, tiny_model_dir, monkeypatch):
    (tmp_path / "data.jsonl").write_text(json.dumps({"id": "r0", "split": "test", "question": "Say 1"}) + "\n")
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "test_toy.py").write_text(TASK)
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    sweep_dir = tmp_path / "sweeps" / "lr-sweep"
    result = subprocess.run(
        [sys.executable, "-m", "agentcore_rl_harness.cli", "sweep", "-m", "seed=0,1", "sweep.mode=eval",
         "sweep.paths=[test_toy.py]", "model=tiny", "sampling.max_tokens=4", "runtime.concurrency=2",
         "logger=[wandb,mlflow,tensorboard]", f"hydra.sweep.dir={sweep_dir}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = [sweep_dir / f"job-{n}" / "run" for n in (0, 1)]

    wandb_runs = [read_wandb_run(next((run / "wandb").glob("offline-run-*/run-*.wandb"))) for run in jobs]
    assert [(r.group, r.name) for r in wandb_runs] == [("lr-sweep", "lr-sweep-job-0"), ("lr-sweep", "lr-sweep-job-1")]
    assert [r.config["seed"] for r in wandb_runs] == [0, 1]

    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("agentcore-rl")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["lr-sweep", "lr-sweep-job-0", "lr-sweep-job-1"]
    parent = runs["lr-sweep"]
    assert parent.info.status == "FINISHED"
    assert json.loads((sweep_dir / "mlflow_parent.json").read_text())["run_id"] == parent.info.run_id
    for name in ("lr-sweep-job-0", "lr-sweep-job-1"):
        assert runs[name].data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert runs[name].data.metrics["eval/overall/n"] == 2.0

    for run in jobs:
        report = json.loads((run / "report.json").read_text())
        scalars, _ = read_tensorboard(run / "tensorboard")
        assert scalars["eval/overall/n"] == {0: 2.0}
        assert abs(scalars["eval/overall/success_rate"][0] - report["overall"]["success_rate"]["value"]) < 1e-6
