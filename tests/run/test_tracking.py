"""`run/tracking.py`: whole runs over the fakes with trackers attached — what each tracker is
told, in which order, equal to the run directory; and a failing tracker (the shipped fake, and
the real MLflow client against a dead server) costs the run nothing."""

from __future__ import annotations

import json
import socket

from run_fakes import FAST, RecordingTrainer, make_spec, said_four
from terminal_lines import Lines
from test_run_core import TRAIN, _drive

from agentcore_rl_harness.reports.model import Report
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.run.tracking import Tracking, report_metrics, step_metrics
from agentcore_rl_harness.trackers.fake_tracker import read_calls


def _run(tmp_path, mode, harness, *overrides, terminal=None):
    return Run.made(RunOptions(mode=mode, overrides=(*FAST, *overrides), rootdir=tmp_path, out=tmp_path / "out"),
                    terminal=terminal, harness=harness)


def _steps(run):
    return [json.loads(line) for line in (run.run_dir / "train" / "steps.jsonl").read_text().splitlines()]


def test_a_tracker_is_told_the_config_every_step_and_the_report(tmp_path, build_harness):
    record = tmp_path / "calls.jsonl"
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], test=1, train=2)
    overrides = [*TRAIN, f"+logger.fake.record={record}"]
    run = _run(tmp_path, "run", build_harness(*overrides, trainer=RecordingTrainer()), *overrides)
    _drive(run, [spec])
    assert not run.finish()
    calls = read_calls(record)
    assert [c["call"] for c in calls] == ["open", "log_config", "log_summary", "log_step", "log_step",
                                          "log_summary", "log_artifacts", "finish"]
    assert calls[1]["config"] == run.config.resolved and calls[1]["tags"]["run_dir"] == str(run.run_dir)
    assert "version/agentcore-rl-harness" in calls[1]["tags"]
    steps = _steps(run)
    assert [(c["step"], c["metrics"]) for c in calls[3:5]] == [(s["step"], step_metrics(s)) for s in steps]
    assert {"train/loss", "train/groups", "train/wall_time_s/total", "train/rollouts"} <= set(calls[3]["metrics"])
    report = Report.model_validate_json((run.run_dir / "report.json").read_text())
    final = report_metrics(report)
    assert calls[5] == {"call": "log_summary", "step": 2, "metrics": final}  # at the last step
    pre = {k: v for k, v in final.items() if k.startswith("pre/")}
    assert calls[2]["step"] == 0 and calls[2]["metrics"] == pre  # as soon as the pre-eval ended
    assert {"pre/overall/success_rate_ci_low", "post/task/toy/success_rate", "delta/overall/p_value",
            "delta/task/toy/delta", "post/overall/n"} <= set(final)
    assert calls[6]["links"]["run_dir"] == str(run.run_dir)
    assert sorted(p.rsplit("/", 1)[1] for p in calls[6]["paths"]) == ["junit.xml", "report.html", "report.json",
                                                                     "report.md"]
    assert calls[7] == {"call": "finish", "failed": False}


def test_an_eval_run_reports_its_phase_with_failures_by_status(tmp_path, build_harness):
    record = tmp_path / "calls.jsonl"
    run = _run(tmp_path, "eval", build_harness(), f"+logger.fake.record={record}")
    _drive(run, [make_spec(tmp_path, samples=2, rewards=[said_four])])
    assert not run.finish()
    [summary] = [c for c in read_calls(record) if c["call"] == "log_summary"]
    assert summary["metrics"]["eval/overall/success_rate"] == 0.5
    assert summary["metrics"]["eval/overall/failures/task_failed"] == 2.0
    assert summary["metrics"]["eval/task/toy/n"] == 4.0


def test_a_failing_tracker_warns_once_and_the_run_loses_nothing(tmp_path, build_harness):
    record = tmp_path / "calls.jsonl"
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], test=1, train=2)
    overrides = [*TRAIN, f"+logger.fake.record={record}", "+logger.fake.fail_on=[log_step]"]
    terminal = Lines()
    run = _run(tmp_path, "run", build_harness(*overrides, trainer=RecordingTrainer()), *overrides,
               terminal=terminal)
    outcomes = _drive(run, [spec])
    assert not run.finish() and len(outcomes) == 2  # 1 test row x 2 samples, post-eval
    warnings = [line for line in terminal.lines if "warning: logger=fake" in line]
    assert len(warnings) == 1 and "log step: FakeTrackerError" in warnings[0]
    assert "the run goes on without it" in warnings[0]
    assert [c["call"] for c in read_calls(record)] == ["open", "log_config", "log_summary", "log_step"]
    assert [s["step"] for s in _steps(run)] == [1, 2]  # the run's own record is whole
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["delta"] is not None and len(report["train"]) == 2


def test_a_tracker_that_cannot_start_leaves_the_others_and_the_run(tmp_path, build_harness):
    record = tmp_path / "calls.jsonl"
    terminal = Lines()
    overrides = ["+logger.fake.fail_on=[open]", f"+logger.fake.record={record}", "logger=tensorboard"]
    run = _run(tmp_path, "eval", build_harness(), *overrides, terminal=terminal)
    _drive(run, [make_spec(tmp_path, samples=2, rewards=[said_four])])
    assert not run.finish()
    assert any("logger=fake failed (start: FakeTrackerError" in line for line in terminal.lines)
    assert (run.run_dir / "report.json").is_file()
    assert list((run.run_dir / "tensorboard").glob("events.out.tfevents.*"))  # the other tracker ran


def test_mlflow_against_a_dead_server_warns_and_the_run_goes_on(tmp_path, build_harness, monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    terminal = Lines()
    overrides = ["logger=mlflow", f"logger.mlflow.tracking_uri=http://127.0.0.1:{port}"]
    run = _run(tmp_path, "eval", build_harness(), *overrides, terminal=terminal)
    outcomes = _drive(run, [make_spec(tmp_path, samples=2, rewards=[said_four])])
    assert not run.finish() and len(outcomes) == 4
    [warning] = [line for line in terminal.lines if "warning: logger=mlflow" in line]
    assert "start:" in warning and "the run goes on without it" in warning
    assert json.loads((run.run_dir / "report.json").read_text())["overall"]["rollouts"] == 4


def test_the_fan_out_drops_only_the_tracker_that_failed():
    told = []

    class Recorder:
        def log_step(self, *, step, metrics):
            told.append((step, dict(metrics)))

    class Broken:
        def log_step(self, *, step, metrics):
            raise ConnectionError("quota exceeded")

    lines = []
    tracking = Tracking(trackers={"broken": Broken(), "ok": Recorder()}, write=lines.append)
    for step in range(2):
        tracking.step({"step": step, "loss": 0.5, "excluded": {"timeout": 1}, "note": "text", "kl": None})
    flat = {"train/loss": 0.5, "train/excluded/timeout": 1.0}  # numbers only, nested keys joined
    assert told == [(0, flat), (1, flat)]
    assert list(tracking.trackers) == ["ok"] and len(lines) == 1
    assert "logger=broken failed (log step: ConnectionError: quota exceeded)" in lines[0]
    assert tracking.failed == {"broken": "log step: ConnectionError: quota exceeded"}


def test_a_resumed_run_tells_its_tracker_the_steps_it_kept_then_the_new_ones(tmp_path, build_harness):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], test=1, train=2)
    first = _run(tmp_path, "run", build_harness(*TRAIN, trainer=RecordingTrainer()), *TRAIN)
    _drive(first, [spec])
    first.finish()
    record = tmp_path / "resumed.jsonl"
    more = [*FAST, *TRAIN, "trainer.steps=3", f"+logger.fake.record={record}"]
    second = Run.made(RunOptions(mode="run", resume=first.run_dir, overrides=tuple(more), rootdir=tmp_path),
                      terminal=None, harness=build_harness(*more, trainer=RecordingTrainer()))
    _drive(second, [spec])
    assert not second.finish()
    steps = _steps(second)
    assert [s["step"] for s in steps] == [1, 2, 3]
    told = [(c["step"], c["metrics"]) for c in read_calls(record) if c["call"] == "log_step"]
    assert told == [(s["step"], step_metrics(s)) for s in steps]
