import pytest

from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.build import build_report, paired_delta, summarize

from test_store import make_rollout


def _build(rollouts, mode="eval", item_phase="eval", **kwargs):
    return build_report(
        run_id="r", mode=mode, config={"model": {"name": "tiny"}, "seed": 3}, overrides=[],
        versions={}, git_sha=None, started_at="", wall_time_s=1.0, rollouts=rollouts,
        item_phase=item_phase, **kwargs)


ROLLOUTS = [
    make_rollout("a"),
    make_rollout("b", status=Status.TASK_FAILED, success=False, reward=0.0, error="wrong"),
    make_rollout("c", status=Status.TIMEOUT, success=False, reward=None, error="timed out"),
    make_rollout("d", status=Status.INFRA_ERROR, success=None, reward=None, error="boom"),
    make_rollout("e", task="x|y", status=Status.AGENT_ERROR, success=False, reward=None),
]


def test_summary_denominator_excludes_infra_errors():
    summary = summarize(ROLLOUTS)
    assert summary.rollouts == 5 and summary.success_rate.n == 4
    assert summary.success_rate.value == 0.25
    assert summary.failures == {"agent_error": 1, "infra_error": 1, "task_failed": 1, "timeout": 1}
    assert summary.mean_reward.value == 0.5 and summary.mean_reward.n == 2
    assert summary.tokens.prompt == 25 and summary.tokens.total == 35
    assert summary.sessions == 1 and summary.turns == 5
    assert "infra_error" in summary.denominator and "excluded" in summary.denominator


def test_pass_at_k_and_pass_hat_k_for_every_k_up_to_the_samples():
    rollouts = [make_rollout("a", sample_index=i, success=i < 2) for i in range(4)]
    summary = summarize(rollouts)
    assert summary.samples_per_row == 4
    assert set(summary.pass_at_k) == set(summary.pass_hat_k) == {"1", "2", "3", "4"}
    assert summary.pass_at_k["1"] == summary.pass_hat_k["1"] == 0.5
    assert summary.pass_at_k["3"] == 1.0 and summary.pass_hat_k["2"] == pytest.approx(1 / 6)
    assert summary.pass_hat_k["3"] == 0.0


def test_mean_reward_interval_is_seeded_and_brackets_the_mean():
    rollouts = [make_rollout(f"r{i}", reward=float(i % 3)) for i in range(30)]
    first, again = summarize(rollouts, seed=1), summarize(rollouts, seed=1)
    reward = first.mean_reward
    assert reward == again.mean_reward
    assert reward.ci_low < reward.value < reward.ci_high


def test_per_tag_summaries_and_task_tags_are_reported():
    rollouts = [make_rollout("a", task="t1"), make_rollout("b", task="t2", success=False,
                                                            status=Status.TASK_FAILED)]
    report = _build(rollouts, tags={"t1": ["math", "easy"], "t2": ["math"], "t3": []})
    assert sorted(report.tags) == ["easy", "math"]
    assert report.tags["math"].success_rate.value == 0.5 and report.tags["easy"].rollouts == 1
    assert report.task_tags == {"t1": ["math", "easy"], "t2": ["math"]}


def test_retried_rollouts_count_once_and_are_flagged():
    first = make_rollout("a", status=Status.INFRA_ERROR, success=None, reward=None)
    redone = make_rollout("a", session_id="arl-y")
    report = _build([first, redone, make_rollout("b")])
    assert report.overall.rollouts == 2 and report.overall.retried == 1
    assert [o.retried for o in report.outcomes] == [True, False]
    moved_aside = _build([redone], discarded=[first])  # a resume moved the first attempt aside
    assert moved_aside.overall.retried == 1 and moved_aside.overall.failures == {}


def test_paired_delta_has_mcnemar_and_a_paired_bootstrap_for_reward():
    pre = [make_rollout(f"r{i}", phase="pre", success=False, reward=0.0) for i in range(10)]
    post = [make_rollout(f"r{i}", phase="post", success=True, reward=1.0) for i in range(10)]
    delta = paired_delta(pre, post)
    assert delta.pairs == 10 and delta.improved == 10 and delta.p_value == pytest.approx(2 / 1024)
    assert delta.reward_delta == 1.0 and delta.reward_pairs == 10
    same = paired_delta(pre, [r.replace(phase="post") for r in pre])
    assert same.p_value == 1.0 and same.reward_p_value == 1.0 and same.delta == 0.0


def test_run_mode_has_pre_post_delta_per_task_and_tag():
    pre = [make_rollout(f"r{i}", phase="pre", success=i < 2, reward=float(i < 2)) for i in range(6)]
    post = [make_rollout(f"r{i}", phase="post", success=i < 5, reward=float(i < 5)) for i in range(6)]
    report = _build(pre + post, mode="run", item_phase="post", tags={"t": ["arith"]})
    assert report.pre.overall.success_rate.value == pytest.approx(2 / 6)
    assert report.overall.success_rate.value == pytest.approx(5 / 6)
    assert report.delta.tasks["t"].improved == 3 and report.delta.tags["arith"].pairs == 6
    assert report.delta.overall.reward_p_value is not None
    assert report.pre.tags["arith"].rollouts == 6
