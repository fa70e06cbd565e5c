import json
import re
import xml.etree.ElementTree as ET

from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.build import build_report, summarize, summarize_by_task
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
    make_rollout("f", status=Status.TASK_ERROR, success=None, reward=None, error="KeyError: 'x'"),
]


def test_markdown_escapes_table_cells_and_states_the_verdict():
    text = render_markdown(_report(ROLLOUTS))
    assert "**25.0% success (4 rollouts" in text
    assert "| x\\|y |" in text
    assert "## Failures" in text and "- `infra_error`: 1 of 6 rollouts" in text
    # a bug in the task's code is counted apart and left out of n, like an infrastructure error
    assert "- `task_error`: 1 of 6 rollouts" in text
    assert "1 task_error(s): bugs in the task's own code, not counted" in text
    assert "[report.html](report.html)" in text and "[rollouts.jsonl](rollouts.jsonl)" in text


def test_markdown_has_intervals_and_paired_deltas_in_run_mode():
    pre = [make_rollout(f"r{i}", phase="pre", success=False, reward=0.0,
                        status=Status.TASK_FAILED) for i in range(8)]
    post = [make_rollout(f"r{i}", phase="post") for i in range(8)]
    report = build_report(
        run_id="r", mode="run", config={"model": {"name": "tiny"}}, overrides=[], versions={},
        git_sha=None, started_at="", wall_time_s=1.0, rollouts=pre + post, item_phase="post")
    text = render_markdown(report)
    first = text.splitlines()[2]
    assert first.startswith("**100.0% success") and "+100.0pp vs pre-training (significant" in first
    assert "| t | 100.0% | 67.6%–100.0% | 8 | 1.000 [1.000, 1.000] | 100.0% | ^1: 100.0% | +100.0pp |" in text
    assert "Before and after training" in text and "McNemar" in text


def test_markdown_shows_each_steps_weight_sync_time():
    report = build_report(
        run_id="r", mode="run", config={"model": {"name": "tiny"}}, overrides=[], versions={}, git_sha=None,
        started_at="", wall_time_s=1.0, rollouts=[make_rollout("r0", phase="post")], item_phase="post",
        train_steps=[{"step": 1, "reward_mean": 0.5, "trained_tokens": 12, "sync_s": 0.0421},
                     {"step": 2, "reward_mean": 0.5, "trained_tokens": 0, "sync_s": None}])
    assert [step.sync_s for step in report.train] == [0.0421, None]
    text = render_markdown(report)
    assert "| step | reward | success | loss | informative groups | tokens trained | weight sync s |" in text
    assert "| 1 | 0.500 | n/a | n/a | n/a | 12 | 0.042 |" in text
    assert "| 2 | 0.500 | n/a | n/a | n/a | 0 | n/a |" in text  # nothing trained: nothing synced


def test_markdown_and_json_count_async_drops_and_stragglers_cut_from_partial_groups():
    def line(step, dropped, cut):
        return {"step": step, "reward_mean": 0.5, "trained_tokens": 12,
                "async": {"dropped_stale": dropped, "cut_stragglers": cut, "paced_starts": 1,
                          "staleness": {"0": 4, "1": 2}}}

    report = build_report(
        run_id="r", mode="run", config={"model": {"name": "tiny"}}, overrides=[], versions={}, git_sha=None,
        started_at="", wall_time_s=1.0, rollouts=[make_rollout("r0", phase="post")], item_phase="post",
        train_steps=[line(1, 0, 2), line(2, 1, 3)])
    assert [step.cut_stragglers for step in report.train] == [2, 3]
    assert (report.training.dropped_stale, report.training.cut_stragglers) == (1, 5)
    assert ("Async training: 1 samples dropped as stale, 5 stragglers cut from partial groups (never trained), "
            "2 group starts paced; trained samples by staleness (versions behind): 0: 8, 1: 4") in render_markdown(report)


def _details(case):
    return dict(line.split(": ", 1) for line in case.find("system-out").text.splitlines())


def test_junit_has_one_case_per_rollout_and_suite_properties(tmp_path):
    rollouts = [*ROLLOUTS,
                make_rollout("g", status=Status.LIMIT_EXCEEDED, success=False, reward=None, error="limits.turns=2"),
                make_rollout("h", status=Status.JUDGE_ERROR, success=None, reward=None, error="judge_error: ...")]
    report = _report(rollouts)
    root = ET.fromstring(render_junit(report, rollouts))
    cases = root.findall(".//testcase")
    assert len(cases) == 8
    assert len(root.findall(".//testcase/failure")) == 4  # limit_exceeded is the agent's failure
    assert len(root.findall(".//testcase/error")) == 3  # infra_error, task_error, judge_error: not the agent's
    assert not root.findall(".//testcase/properties")  # the strict schema has none in a testcase
    assert {_details(case)["status"] for case in cases} == {s.value for s in Status}
    first = _details(cases[0])
    assert {"reward", "status", "session_id", "elapsed_s", "phase"} <= set(first)
    assert first["status"] == "completed" and first["session_id"] == rollouts[0].session_id
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert suite_props["mode"] == "eval" and json.loads(suite_props["overrides"]) == ["model=tiny"]
    assert {"model", "trainer"} <= set(suite_props)


def test_junit_suite_time_is_the_runs_wall_time_not_the_sum_of_rollouts():
    rollouts = [make_rollout(f"r{i}", elapsed_s=40.0) for i in range(4)]  # run at once
    report = _report(rollouts)
    report.run.wall_time_s = 84.6
    root = ET.fromstring(render_junit(report, rollouts))
    assert root.get("time") == "84.600"
    assert [suite.get("time") for suite in root.findall("testsuite")] == ["84.600"]
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert suite_props["rollout_time_s"] == "160.000"


def test_write_reports_writes_all_four_and_the_step_summary(tmp_path, monkeypatch):
    summary_file = tmp_path / "summary.md"
    summary_file.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    report = _report(ROLLOUTS)
    write_reports(tmp_path, report, ROLLOUTS)
    loaded = Report.model_validate_json((tmp_path / "report.json").read_text())
    assert loaded.overall.success_rate.n == 4
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "junit.xml").is_file()
    step_summary = summary_file.read_text()
    assert step_summary.startswith("earlier step\n")  # appended, not replaced
    report_md = (tmp_path / "report.md").read_text()
    assert report_md.split("\nFiles")[0] in step_summary  # the same report ...
    # ... but no relative links, dead on GitHub's summary page: the run directory says where
    assert not re.search(r"\]\((?!https?://)[^)]*\)", step_summary), step_summary
    assert f"in the run directory `{tmp_path.resolve()}`" in step_summary
    assert "[report.html](report.html)" in report_md  # beside the files, links work


def test_no_step_summary_when_the_variable_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    write_reports(tmp_path, _report(ROLLOUTS), ROLLOUTS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "junit.xml", "report.html", "report.json", "report.md"]
