"""A short `run` at model=tiny with all three trackers, read back with each tool's own reader:
the step series equal train/steps.jsonl and the results equal report.json. Offline: W&B in
offline mode, MLflow on a file store, TensorBoard event files; and no API key in the run dir."""

from __future__ import annotations

import json

import pytest
from readers import read_tensorboard, read_wandb_run
from toy_project import even_length_task, rows, write_project

from agentcore_rl_harness.run.tracking import REPORT_FILES, report_metrics, step_metrics
from agentcore_rl_harness.reports.model import Report

pytestmark = pytest.mark.slow

SECRET = "wandb-key-that-must-not-leak-0123456789"


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, tiny_model_dir):
    """One `run` (2 steps x 2 rows x 3 samples, 6 pre + 6 post rollouts) with every tracker."""
    import os
    import subprocess
    import sys

    root = write_project(tmp_path_factory.mktemp("tracked"), task=even_length_task(samples=3),
                         dataset=rows(6, train=4))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "toy"]):
        subprocess.run([*git, *command], cwd=root, check=True, capture_output=True)
    env = {**os.environ, "WANDB_API_KEY": SECRET, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    for name in ("MLFLOW_TRACKING_URI", "AGENTCORE_RL_SWEEP_DIR", "AGENTCORE_RL_SWEEP_JOB"):
        env.pop(name, None)
    sets = ["model=tiny", "sampling.max_tokens=6", "trainer.steps=2", "trainer.batch_rows=2",
            "trainer.lr=1e-2", "trainer.checkpoint_every=2", "logger=[tensorboard,wandb,mlflow]"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "run",
         *(arg for value in sets for arg in ("--agentcore-rl-set", value)), "--agentcore-rl-out", "run"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    run_dir = root / "run"
    steps = [json.loads(line) for line in (run_dir / "train" / "steps.jsonl").read_text().splitlines()]
    report = Report.model_validate_json((run_dir / "report.json").read_text())
    return root, run_dir, steps, report, result.stdout


def _git_sha(root) -> str:
    import subprocess

    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))  # TensorBoard keeps float32


def test_the_run_itself_is_unchanged(tracked_run):
    _, run_dir, steps, report, stdout = tracked_run
    assert [line["step"] for line in steps] == [1, 2]
    assert report.delta is not None and report.delta.overall.pairs == 6
    assert "warning: logger" not in stdout  # no tracker failed


def test_tensorboard_events_equal_steps_and_report(tracked_run):
    _, run_dir, steps, report, _ = tracked_run
    scalars, texts = read_tensorboard(run_dir / "tensorboard")
    for line in steps:
        expected = step_metrics(line)
        assert expected["train/rollouts"] == 6.0 and "train/loss" in expected
        for key, value in expected.items():
            assert _close(scalars[key][line["step"]], value), key
    final = report_metrics(report)
    assert {"pre/overall/success_rate", "post/task/test_toy/success_rate_ci_low",
            "delta/overall/p_value", "delta/task/test_toy/delta"} <= set(final)
    for key, value in final.items():
        assert _close(scalars[key][2], value), key  # the post-eval summary is at step 2, the last
    for key in final:
        if key.startswith("pre/"):
            assert _close(scalars[key][0], final[key]), key  # logged when the pre-eval ended
    config = json.loads("\n".join(line[4:] for line in texts["config/text_summary"].splitlines()))
    assert config["model"]["name"] == "tiny" and "tensorboard" in config["logger"]
    assert str(run_dir) in texts["artifacts/text_summary"]


def test_wandb_offline_run_equals_steps_and_report(tracked_run):
    root, run_dir, steps, report, _ = tracked_run
    sha = _git_sha(root)
    [path] = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    run = read_wandb_run(path)
    assert run.name == run_dir.name and run.group == ""
    for line in steps:
        logged = run.history[line["step"]]
        for key, value in step_metrics(line).items():
            assert logged[key] == value, key
    final = report_metrics(report)
    for key, value in final.items():
        assert run.summary[key] == value, key
    assert run.config["model"]["name"] == "tiny"
    tags = run.config["agentcore_rl"]
    assert tags["run_dir"] == str(run_dir) and "version/torch" in tags and tags["git_sha"] == sha
    assert run.summary["run_dir"] == str(run_dir)
    [files] = run.artifacts.values()
    assert sorted(files) == sorted(name for name in REPORT_FILES if (run_dir / name).is_file())
    assert run.exit_code == 0


def test_mlflow_file_store_equals_steps_and_report(tracked_run, monkeypatch):
    from mlflow.tracking import MlflowClient

    from agentcore_rl_harness.trackers.mlflow_tracker import metric_key

    root, run_dir, steps, report, _ = tracked_run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for it to read a file store
    client = MlflowClient(tracking_uri=(root / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("agentcore-rl")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert run.data.params["model.name"] == '"tiny"'
    assert run.data.tags["agentcore_rl.run_dir"] == str(run_dir)
    assert run.data.tags["mlflow.source.git.commit"] == _git_sha(root)
    for key, value in step_metrics(steps[0]).items():
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, metric_key(key))}
        assert history == {line["step"]: step_metrics(line)[key] for line in steps}, key
    for key, value in report_metrics(report).items():
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, metric_key(key))}
        assert history[2] == value, key
    artifacts = {item.path for item in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "report.json", "report.html", "junit.xml"} <= artifacts


def test_no_api_key_is_written_anywhere(tracked_run):
    root, run_dir, *_ = tracked_run
    leaked = [str(path) for folder in (run_dir, root / "mlruns") for path in folder.rglob("*")
              if path.is_file() and SECRET.encode() in path.read_bytes()]
    assert leaked == []
