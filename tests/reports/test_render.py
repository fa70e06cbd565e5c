import json
import xml.etree.ElementTree as ET

from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.build import summarize, summarize_by_task
from agentcore_rl_harness.reports.model import Report, RunInfo
from agentcore_rl_harness.reports.render import render_junit, render_markdown, write_reports

from test_store import make_rollout


def _report(rollouts):
    run = RunInfo(id="r", mode="eval", config={"model": {"name": "tiny"}}, overrides=["model=tiny"],
                  versions={}, git_sha=None, started_at="2026-01-01T00:00:00+00:00", wall_time_s=1.0)
    return Report(run=run, overall=summarize(rollouts), tasks=summarize_by_task(rollouts))


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
    assert summary.mean_reward == 0.5  # rollouts without a reward are not averaged in
    assert summary.tokens.prompt == 25


def test_markdown_escapes_table_cells_and_states_the_verdict():
    text = render_markdown(_report(ROLLOUTS))
    assert "**25.0% success (4 rollouts" in text
    assert "| x\\|y |" in text


def test_junit_is_valid_and_has_one_case_per_rollout(tmp_path):
    report = _report(ROLLOUTS)
    root = ET.fromstring(render_junit(report, ROLLOUTS))
    cases = root.findall(".//testcase")
    assert len(cases) == 5
    assert len(root.findall(".//testcase/failure")) == 3
    assert len(root.findall(".//testcase/error")) == 1
    statuses = {p.get("value") for p in root.findall(".//testcase/properties/property[@name='status']")}
    assert statuses == {s.value for s in Status}
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert suite_props["mode"] == "eval" and json.loads(suite_props["overrides"]) == ["model=tiny"]
    write_reports(tmp_path, report, ROLLOUTS)
    loaded = Report.model_validate_json((tmp_path / "report.json").read_text())
    assert loaded.overall.success_rate.n == 4
