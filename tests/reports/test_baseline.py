"""report.md pairs a run with its baseline (--agentcore-rl-compare), naming a hosted baseline's
model and saying it captured no tokens."""

from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.reports.markdown import render_markdown
from agentcore_rl_harness.run.finish import judge_gates
from agentcore_rl_harness.reports.config import GatesConfig

from test_store import make_rollout

HOSTED = {"model": {"name": "tiny"}, "sampler": {"kind": "hosted", "hosted": {
    "provider": "openai", "model": "gpt-4.1-mini", "url": "https://api.openai.com/v1"}}}


def _report(successes, *, run_id, mode="eval", config=None):
    rollouts = [make_rollout(f"r{i}", success=i in successes, reward=float(i in successes),
                             status=Status.COMPLETED if i in successes else Status.TASK_FAILED) for i in range(20)]
    return build_report(run_id=run_id, mode=mode, config=config or {"model": {"name": "tiny"}}, overrides=[],
                        versions={}, git_sha=None, started_at="", wall_time_s=1.0, rollouts=rollouts,
                        item_phase="eval")


def test_a_hosted_baseline_report_says_it_captured_no_tokens():
    text = render_markdown(_report({1, 2}, run_id="hosted-run", config=HOSTED))
    assert "> **NOTE** Hosted baseline: every turn passed through to gpt-4.1-mini (openai, " \
           "https://api.openai.com/v1) (sampler=hosted). No token capture" in text
    # a bare run id is no path --agentcore-rl-compare can find: the note says to give the directory
    assert "--agentcore-rl-compare with this run's directory (.../hosted-run) or a name saved with " \
           "--agentcore-rl-save-baseline" in text
    assert "NOTE" not in render_markdown(_report({1, 2}, run_id="plain"))


def test_a_trained_run_compared_with_the_hosted_baseline_renders_the_paired_table(tmp_path):
    baseline_dir = tmp_path / "hosted"
    baseline_dir.mkdir()
    (baseline_dir / "report.json").write_text(_report(set(range(4)), run_id="hosted-run", config=HOSTED).model_dump_json())
    trained = _report(set(range(16)), run_id="trained-run")
    assert judge_gates(trained, GatesConfig(), baseline_dir) == []
    assert trained.baseline.hosted.startswith("gpt-4.1-mini") and trained.baseline.delta.overall.pairs == 20
    text = render_markdown(trained)
    section = text[text.index("## Against the baseline"):]
    assert "Baseline: hosted model gpt-4.1-mini (openai, https://api.openai.com/v1), run `hosted-run`" in section
    assert "**20.0% -> 80.0% (+60.0pp) on 20 pairs; a significant change in success" in section
    assert "no token capture there" in section
    assert "| **overall** | 20.0% | 80.0% | +60.0pp | 20 | 12 / 0 |" in section


def test_without_a_baseline_there_is_no_section():
    report = _report({1}, run_id="alone")
    judge_gates(report, GatesConfig(), None)
    assert report.baseline is None and "Against the baseline" not in render_markdown(report)
