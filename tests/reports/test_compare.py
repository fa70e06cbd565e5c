import json

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.reports.compare import (
    check_gates, compare_reports, compare_runs, parse_amount,
)
from agentcore_rl_harness.store import RunStore

from test_store import make_rollout

ROWS = 20


def _rollouts(successes: set[int], tasks=("t",)):
    return [
        make_rollout(f"r{i}", task=task, success=i in successes, reward=float(i in successes),
                     status=Status.COMPLETED if i in successes else Status.TASK_FAILED)
        for task in tasks for i in range(ROWS)
    ]


def _report(rollouts, run_id="r"):
    return build_report(
        run_id=run_id, mode="eval", config={"model": {"name": "tiny"}}, overrides=[],
        versions={}, git_sha=None, started_at="", wall_time_s=1.0, rollouts=rollouts,
        item_phase="eval")


def _write_run(path, rollouts, run_id):
    store = RunStore(path)
    for rollout in rollouts:
        store.append(rollout)
    store.close()
    (path / "report.json").write_text(_report(rollouts, run_id).model_dump_json())
    return path


def test_strictly_better_run_is_a_significant_improvement(tmp_path):
    a = _write_run(tmp_path / "a", _rollouts(set(range(5))), "a")
    b = _write_run(tmp_path / "b", _rollouts(set(range(17))), "b")
    comparison = compare_runs(a, b)
    overall = comparison.overall
    assert overall.pairs == ROWS and overall.improved == 12 and overall.regressed == 0
    assert overall.delta == pytest.approx(0.6) and overall.p_value < 0.001
    assert overall.reward_delta == pytest.approx(0.6) and overall.reward_p_value < 0.01
    assert comparison.unpaired_a == comparison.unpaired_b == 0


def test_identical_runs_raise_no_alarm(tmp_path):
    rollouts = _rollouts({1, 4, 9})
    comparison = compare_runs(_write_run(tmp_path / "a", rollouts, "a"),
                              _write_run(tmp_path / "b", rollouts, "b"))
    assert comparison.overall.delta == 0 and comparison.overall.p_value == 1.0
    assert comparison.overall.reward_p_value == 1.0
    baseline = _report(rollouts)
    assert check_gates(_report(rollouts), baseline=baseline,
                       max_regression={"success_rate": "-2pp", "mean_reward": "-0.01"}) == []


def test_regression_gate_needs_a_significant_drop_beyond_the_allowance():
    baseline = _report(_rollouts(set(range(15))))
    noisy = _report(_rollouts(set(range(14))))  # -5pp, one discordant pair: noise
    assert check_gates(noisy, baseline=baseline, max_regression={"success_rate": "-2pp"}) == []
    worse = _report(_rollouts(set(range(3))))  # -60pp, 12 regressions
    failure, per_task = check_gates(worse, baseline=baseline, max_regression={"success_rate": "-2pp"})
    assert per_task.subject == "t"  # judged overall and per task
    assert failure.gate == "gates.max_regression.success_rate" and failure.subject == "overall"
    assert failure.value == pytest.approx(-0.6) and failure.p_value < 0.001
    assert "-60pp" in failure.message and "allowed -2pp" in failure.message
    # a large allowance tolerates even a significant drop
    assert check_gates(worse, baseline=baseline, max_regression={"success_rate": "-70pp"}) == []


def test_regression_gate_without_pairs_fails_rather_than_passing_silently():
    baseline = _report(_rollouts({1}, tasks=("other",)))
    (failure,) = check_gates(_report(_rollouts({1})), baseline=baseline,
                             max_regression={"success_rate": "-2pp"})
    assert "no rollouts pair" in failure.message


def test_min_success_rate_overall_and_per_task():
    report = _report(_rollouts(set(range(10)), tasks=("t1", "t2")))
    assert check_gates(report, min_success_rate=0.5) == []
    (failure,) = check_gates(report, min_success_rate=0.6)
    assert failure.subject == "overall" and "0.500 < 0.600" in failure.message
    failures = check_gates(report, min_success_rate={"t1": 0.4, "t2": 0.9})
    assert [f.subject for f in failures] == ["t2"]
    with pytest.raises(HarnessError, match="no such task"):
        check_gates(report, min_success_rate={"nope": 0.1})


def test_bad_gate_config_is_a_clear_error():
    report = _report(_rollouts({1}))
    with pytest.raises(HarnessError, match="needs a baseline"):
        check_gates(report, max_regression={"success_rate": "-2pp"})
    with pytest.raises(HarnessError, match="unknown metric"):
        check_gates(report, baseline=report, max_regression={"speed": "-2pp"})
    with pytest.raises(HarnessError, match="-2 points"):
        parse_amount("-2 points", metric="success_rate")
    assert parse_amount("-2pp", metric="x") == pytest.approx(-0.02)
    assert parse_amount("-0.05", metric="x") == -0.05 and parse_amount(0.1, metric="x") == 0.1


def test_compare_accepts_a_report_json_and_pairs_by_task(tmp_path):
    a = _report(_rollouts(set(range(5)), tasks=("t1", "t2")), "a")
    b = _report(_rollouts(set(range(5)), tasks=("t1",)), "b")
    comparison = compare_reports(a, b)
    assert comparison.overall.pairs == ROWS and comparison.unpaired_a == ROWS
    path = tmp_path / "report.json"
    path.write_text(a.model_dump_json())
    assert json.loads(compare_runs(path, path).model_dump_json())["overall"]["pairs"] == 2 * ROWS


def test_zero_to_zero_is_no_change_never_a_significant_one():
    from agentcore_rl_harness.reports.compare import render_comparison

    a = [make_rollout(f"r{i}", success=False, reward=0.0, status=Status.TASK_FAILED) for i in range(ROWS)]
    b = [make_rollout(f"r{i}", success=False, reward=0.5, status=Status.TASK_FAILED) for i in range(ROWS)]
    text = render_comparison(compare_reports(_report(a, "a"), _report(b, "b")))
    headline = text.splitlines()[2]
    assert "0.0% -> 0.0%" in headline
    assert "success unchanged on every pair (no discordant pairs)" in headline
    assert "significant change in success" not in headline and "McNemar p=1" not in headline
    assert "mean reward changed significantly (+0.5" in headline  # the reward change keeps its own test


def test_a_success_change_without_significance_says_so():
    from agentcore_rl_harness.reports.compare import render_comparison

    a = _rollouts({0})
    b = _rollouts({1, 2})
    text = render_comparison(compare_reports(_report(a, "a"), _report(b, "b")))
    assert "no significant change in success (McNemar p=1)" in text.splitlines()[2]
