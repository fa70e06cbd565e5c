"""`run/finish.py`: gates, baselines, the collect dataset, the closing lines and the run's verdict."""

from run_fakes import FAST

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.records import Rollout, Status, Usage
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.run import finish


def _rollout(index, success):
    return Rollout(run_id="x", task="toy", row_id=f"r{index}", sample_index=0, group_id="g", phase="eval", step=None,
                   session_id="s", status=Status.COMPLETED if success else Status.TASK_FAILED, error=None,
                   reward=float(success), rewards={}, success=success, result={}, turns=1, usage=Usage(),
                   elapsed_s=0.0, traces=())


def _report(successes):
    rollouts = [_rollout(i, s) for i, s in enumerate(successes)]
    return build_report(run_id="x", mode="eval", config={"seed": 0}, overrides=[], versions={}, git_sha=None,
                        started_at="2025-01-01T00:00:00", wall_time_s=1.0, rollouts=rollouts, item_phase="eval")


def test_only_the_runs_own_failures_fail_it():
    assert not finish.run_failed(infra_errors=0, other_failures=0, gate_failures=[])
    assert finish.run_failed(infra_errors=1, other_failures=0, gate_failures=[])
    assert finish.run_failed(infra_errors=0, other_failures=1, gate_failures=[])
    assert finish.run_failed(infra_errors=0, other_failures=0, gate_failures=["success_rate"])


def test_gates_are_judged_and_put_on_the_report(tmp_path):
    gates = compose_config([*FAST, "gates.min_success_rate=0.9"]).typed.gates
    report = _report([True, False])
    (failure,) = finish.judge_gates(report, gates, None)
    assert "0.9" in failure or "90" in failure
    assert report.gates and finish.judge_gates(_report([True]), gates, None) == []
    bad = compose_config([*FAST, "+gates.max_regression={success_rate: -2pp}"]).typed.gates
    assert finish.judge_gates(_report([True]), bad, None)[0].startswith("gate configuration:")


def test_a_saved_baseline_is_found_by_name_or_path(tmp_path):
    path = finish.write_baseline(tmp_path, "main", _report([True]))
    assert path == tmp_path / ".agentcore-rl" / "baselines" / "main.json"
    assert finish.resolve_baseline(tmp_path, "main") == path
    assert finish.resolve_baseline(tmp_path, str(path)) == path
    try:
        finish.resolve_baseline(tmp_path, "nope")
    except Exception as exc:
        assert "--agentcore-rl-compare 'nope'" in str(exc)
    else:
        raise AssertionError("an unknown baseline must be refused")


def test_summary_lines_say_where_the_run_is_and_what_failed(tmp_path):
    report = _report([True, False])
    lines = finish.summary_lines(mode="eval", report=report, run_dir=tmp_path, infra_errors=2, gate_failures=["g"])
    assert lines[0].startswith("agentcore-rl eval: ") and f"run directory: {tmp_path}" in lines[1]
    assert lines[2:] == ["agentcore-rl: 2 infrastructure error(s): exit 1", "agentcore-rl gate FAILED: g"]
    nothing = finish.summary_lines(mode="eval", report=report, run_dir=None, infra_errors=0, gate_failures=[])
    assert nothing == ["agentcore-rl eval: no rollout ran, so no run directory was written"]
    assert finish.summary_lines(mode="eval", report=None, run_dir=None, infra_errors=0, gate_failures=[]) == []


def test_the_collect_dataset_leaves_out_infra_errors_and_says_when_it_cannot_be_written(tmp_path, monkeypatch):
    said = []
    infra = _rollout(9, False)
    import dataclasses

    infra = dataclasses.replace(infra, status=Status.INFRA_ERROR, success=None)
    written = []
    monkeypatch.setattr(finish, "write_parquet", lambda run_dir, rollouts: written.extend(rollouts))
    assert finish.save_dataset(tmp_path, [_rollout(0, True), infra], said.append) and len(written) == 1

    def broken(run_dir, rollouts):
        raise OSError("disk full")

    monkeypatch.setattr(finish, "write_parquet", broken)
    assert not finish.save_dataset(tmp_path, [_rollout(0, True)], said.append)
    assert "cannot write rollouts.parquet (OSError: disk full)" in said[0]
