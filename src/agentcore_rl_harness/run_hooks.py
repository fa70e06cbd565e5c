"""The hooks of one `--agentcore-rl` run, on plugin objects that `plugin.pytest_configure`
registers only when a run exists (pytest's `junitxml` pattern: `LogXML` is registered only with
`--junitxml`); without `--agentcore-rl`, `TasksSkipped` collects each task as one skipped item.
Each object holds its run, so no hook asks whether there is one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import sharding
from .errors import DatasetError, HarnessError, MissingDependencyError, ModelError
from .pytest_outcomes import call_task, failure_line, finish_session, record_report
from .run.core import Run
from .run.plan import MODES, item_name
from .task_collection import no_tasks_message
from .tasks import task_spec

CASE_FIXTURE = "_arl_case"
SKIP_REASON = "agentcore-rl task: run it with `pytest --agentcore-rl eval` (modes: {modes})"


class TasksSkipped:
    """Without `--agentcore-rl`: each task test is one skipped item saying how to run it."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if task_spec(metafunc.function) is None:
            return
        reason = SKIP_REASON.format(modes=", ".join(MODES))
        metafunc.parametrize(CASE_FIXTURE, [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
                             ids=["agentcore-rl-disabled"], indirect=True)


class RunHooks:
    """A run's pytest hooks: plan each task's items, start their rollouts with the test loop,
    score each item, record its report, finish the run and say how it went."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._dataset_errors: list[str] = []  # tasks whose dataset is missing or empty

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        spec = task_spec(metafunc.function)
        if spec is None:
            return
        try:
            cases = self._run.plan(spec)
        except DatasetError as exc:  # missing, empty or bad: a usage error once collection is done
            self._dataset_errors.append(str(exc))
            cases = []
        except HarnessError as exc:  # the task's declaration: its message, not a traceback
            raise pytest.Collector.CollectError(str(exc)) from exc
        metafunc.parametrize(CASE_FIXTURE, cases, ids=[item_name(case) for case in cases], indirect=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Missing or empty datasets end as a usage error (exit 4); no task at all says why."""
        if self._dataset_errors:
            raise pytest.UsageError("\n".join(self._dataset_errors))
        if not task_items(session.items) and not any(task_spec(getattr(i, "function", None)) for i in session.items):
            config = session.config
            roots = [Path(config.invocation_params.dir, arg.split("::")[0]) for arg in config.args]
            for line in no_tasks_message(self._run.mode, roots, config.getini("python_files"),
                                         config.getini("python_functions")):
                config.get_terminal_writer().line(line)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        if not session.config.option.collectonly:
            try:
                self._run.start(task_items(sharding.local_items(session.config, session.items)))
            except (MissingDependencyError, ModelError) as exc:  # no torch, no such model: the message alone
                raise pytest.UsageError(f"agentcore-rl {self._run.mode}: {exc}") from exc
        return (yield)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        if task_spec(pyfuncitem.function) is None:
            return None
        call_task(self._run, pyfuncitem)
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        report = yield
        record_report(self._run, item, report, call)
        return report

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        session.exitstatus = finish_session(self._run, session, int(exitstatus))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in self._run.summary_lines():
            terminalreporter.write_line(line)


def task_items(items: list[pytest.Item]) -> list[tuple[str, Any]]:
    """(node id, planned item) of each task item among `items`."""
    found = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and CASE_FIXTURE in callspec.params:
            found.append((item.nodeid, callspec.params[CASE_FIXTURE]))
    return found


class ProgressHooks:
    """Keeps the live progress display and pytest's terminal output out of each other's way."""

    def __init__(self, run: Run) -> None:
        self._run = run

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._run.progress.clear(pytest_next=True, nodeid=nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._run.progress.clear(pytest_next=True, nodeid=report.nodeid)

    @pytest.hookimpl(trylast=True)  # after pytest wrote the item's result (and its [NN%])
    def pytest_runtest_logfinish(self) -> None:
        self._run.item_finished()

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after pytest's final [100%]
    def pytest_runtestloop(self):
        try:
            return (yield)
        finally:
            self._run.items_finished()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self._run.progress.clear(pytest_next=True)


class FailureLines:
    """One line per failed rollout in place of pytest's block each (a task's failures are data,
    and eight rollouts' assertion blocks buried the verdict); ordinary tests keep theirs."""

    def __init__(self, run: Run) -> None:
        self._run = run

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # around pytest's FAILURES and short summary
    def pytest_terminal_summary(self, terminalreporter: Any):
        failed = terminalreporter.stats.get("failed", [])
        rollouts = [(report, self._run.recorded(report.nodeid)) for report in failed]
        lines = [failure_line(report.nodeid, rollout) for report, rollout in rollouts if rollout is not None]
        if lines:
            terminalreporter.stats["failed"] = [report for report, rollout in rollouts if rollout is None]
            terminalreporter.write_sep("=", f"agentcore-rl: {len(lines)} failed rollouts (pytest -v for each "
                                            "one's full report; transcripts in report.html)")
            for line in lines:
                terminalreporter.write_line(line)
        try:
            return (yield)
        finally:
            if lines:
                terminalreporter.stats["failed"] = failed  # the final counts count them
