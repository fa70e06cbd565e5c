"""pytest hooks: thin over `tasks` (declaration) and the run core (`run.core.Run`); pytest's side
of each outcome is mapped in `pytest_outcomes.py`; the fixtures live in `fixtures.py` and are
re-exported here, where pytest finds them on the plugin.

Without `--agentcore-rl`, task tests collect as one skipped item each and ordinary tests are
untouched. With it, each task expands into (row x sample) items whose rollouts start together
when the test loop starts, and each item waits for its own rollout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import interrupts, sharding
from .errors import ConfigError, DatasetError, HarnessError, MissingDependencyError, ModelError
from .fixtures import (  # noqa: F401
    _arl_case, agentcore_rl_config, agentcore_session, backend, gateway, rollout, row, sandbox,
)
from .progress import PytestTerminal
from .pytest_outcomes import RUN_KEY, call_task, failure_line, finish_session, record_report, rollout_properties  # noqa: F401
from .pytest_outcomes import run_of as _run
from .run.core import Run
from .run_options import RunOptions
from .run.plan import MODES, item_name
from .resume_command import resume_command
from .task_collection import no_tasks_message, uncollected_function_message
from .tasks import task_spec

CASE_FIXTURE = "_arl_case"
_DATASET_ERRORS = pytest.StashKey[list[str]]()  # tasks whose dataset is missing or empty
SKIP_REASON = (
    "agentcore-rl task: run it with `pytest --agentcore-rl eval` (modes: {modes})"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentcore-rl", "agentcore-rl-harness: RL and evaluation of agents")
    group.addoption(
        "--agentcore-rl",
        dest="agentcore_rl",
        metavar="MODE",
        default=None,
        help=f"run task tests: one of {', '.join(MODES)}",
    )
    group.addoption(
        "--agentcore-rl-set",
        dest="agentcore_rl_set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Hydra override, repeatable (model=tiny, sampling.temperature=0.7)",
    )
    group.addoption(
        "--agentcore-rl-config",
        dest="agentcore_rl_config",
        metavar="PATH",
        default=None,
        help="config directory (with config.yaml) or a composed YAML file "
        "(default: ./configs if present, else the packaged defaults)",
    )
    group.addoption(
        "--agentcore-rl-out",
        dest="agentcore_rl_out",
        metavar="DIR",
        default=None,
        help="run directory (default: outputs/<UTC timestamp>-<mode>)",
    )
    group.addoption(
        "--agentcore-rl-resume",
        dest="agentcore_rl_resume",
        metavar="DIR",
        default=None,
        help="continue a stopped run in DIR: keep finished rollouts, redo the rest, "
        "resume training from the last checkpoint",
    )
    group.addoption(
        "--agentcore-rl-compare",
        dest="agentcore_rl_compare",
        metavar="BASELINE",
        default=None,
        help="a baseline run directory, report.json or saved baseline name; gates.max_regression "
        "is judged against it",
    )
    group.addoption(
        "--agentcore-rl-save-baseline",
        dest="agentcore_rl_save_baseline",
        metavar="NAME",
        default=None,
        help="keep this run's report as the named baseline (.agentcore-rl/baselines/NAME.json)",
    )
    group.addoption(
        "--agentcore-rl-show-config",
        dest="agentcore_rl_show_config",
        action="store_true",
        default=False,
        help="print the run's composed config (every key, defaults included) and exit before "
        "collecting or running anything",
    )
    parser.addini("agentcore_rl_set", "Hydra overrides applied before --agentcore-rl-set", "linelist")


ASYNCIO_LOOP_SCOPE_INI = "asyncio_default_fixture_loop_scope"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Task bodies run on the harness's own loop, so pytest-asyncio's fixture loop scope is
    pytest-asyncio's future default (`function`) unless the project set one: a user's project
    then starts without pytest-asyncio's "is unset" PytestDeprecationWarning on every run."""
    if config.pluginmanager.has_plugin("asyncio") and config.getini(ASYNCIO_LOOP_SCOPE_INI) is None:
        config._inicache[ASYNCIO_LOOP_SCOPE_INI] = "function"  # no public setter for a string ini


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists: progress draws on it
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "agentcore_rl_task: a task test declared with @agentcore_rl_harness.task"
    )
    if config.getoption("agentcore_rl_show_config"):
        _show_config(config)
    options = RunOptions.from_pytest(config)
    if options is None:
        return
    mode, resume = options.mode, options.resume
    where = sharding.role(config)  # under pytest -n: 'controller' or 'worker'
    if where == "controller":
        sharding.check_controller(config, mode)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    terminal = PytestTerminal(reporter) if reporter is not None else None
    try:
        if where == "worker":
            run = sharding.attached_run(config, mode, terminal)
        elif resume:
            run = Run.resume(mode=mode, run_dir=resume, overrides=list(options.overrides),
                             rootdir=options.rootdir, terminal=terminal)
        else:
            run = Run.create(mode=mode, overrides=list(options.overrides), config_path=options.config_path,
                             out_dir=options.out, rootdir=options.rootdir, terminal=terminal)
    except ConfigError as exc:
        raise pytest.UsageError(f"agentcore-rl config: {exc}") from exc
    except HarnessError as exc:
        raise pytest.UsageError(f"agentcore-rl: {exc}") from exc
    if options.compare is not None:
        run.compare_path = options.compare
    regression = run.config.typed.gates.max_regression
    if regression and run.compare_path is None:
        raise pytest.UsageError(
            f"gates.max_regression={regression} judges this run against a baseline: pass "
            "--agentcore-rl-compare BASELINE (a run directory, report.json or a name saved with "
            "--agentcore-rl-save-baseline), or drop the gate with --agentcore-rl-set "
            "gates.max_regression=null"
        )
    if options.save_baseline is not None:
        run.save_baseline = options.save_baseline
    run.resume_command = resume_command(config.invocation_params.args, run.run_dir)
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(ProgressHooks(run), "agentcore-rl-progress")
    if config.option.verbose < 1:  # pytest -v keeps pytest's full block per failed rollout
        config.pluginmanager.register(FailureLines(run), "agentcore-rl-failure-lines")
    if where == "controller":
        if resume:
            run.reload()  # before the workers start: they read what it keeps
        config.pluginmanager.register(sharding.ShardController(run, resumed=bool(resume)), "agentcore-rl-shard")
        run.write(sharding.controller_line(config, run))
    elif where == "worker":
        config.pluginmanager.register(sharding.ShardWorker(run), "agentcore-rl-shard")
    handlers = interrupts.install(run.resume_command)  # Ctrl-C, SIGTERM: a clean stop; a second exits now
    if handlers is not None:
        config.add_cleanup(handlers.restore)


def _show_config(config: pytest.Config) -> None:
    """`--agentcore-rl-show-config`: compose as a run would (its config dir or file, the ini's and
    the command line's overrides; a resumed run's config.yaml) and print it, then exit 0."""
    import yaml

    from .config import compose_config, default_config_source

    overrides = [*config.getini("agentcore_rl_set"), *config.getoption("agentcore_rl_set")]
    path, resume = config.getoption("agentcore_rl_config"), config.getoption("agentcore_rl_resume")
    source = (Path(resume) / "config.yaml" if resume else Path(path) if path
              else default_config_source(Path(config.rootpath)))
    try:
        composed = compose_config(overrides, source=source)
    except ConfigError as exc:
        raise pytest.UsageError(f"agentcore-rl config: {exc}") from exc
    print(f"# agentcore-rl config from {composed.source}; overrides: {list(composed.overrides)}")
    print(yaml.safe_dump(composed.resolved, sort_keys=False), end="", flush=True)
    pytest.exit("agentcore-rl: config shown, nothing run", returncode=0)


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    spec = task_spec(metafunc.function)
    if spec is None:
        return
    run = _run(metafunc.config)
    if run is None:
        reason = SKIP_REASON.format(modes=", ".join(MODES))
        metafunc.parametrize(
            CASE_FIXTURE,
            [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
            ids=["agentcore-rl-disabled"],
            indirect=True,
        )
        return
    try:
        cases = run.plan(spec)
    except DatasetError as exc:  # missing, empty or bad: a usage error once collection is done
        metafunc.config.stash.setdefault(_DATASET_ERRORS, []).append(str(exc))
        cases = []
    except HarnessError as exc:  # the task's declaration: its message, not a traceback
        raise pytest.Collector.CollectError(str(exc)) from exc
    metafunc.parametrize(
        CASE_FIXTURE,
        cases,
        ids=[item_name(case) for case in cases],
        indirect=True,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and task_spec(item.function) is not None:
            item.add_marker("agentcore_rl_task")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """An @arl.task defined under a name pytest does not collect is a collection error."""
    if not callable(obj) or task_spec(obj) is None or collector.funcnamefilter(name):
        return None
    module = getattr(collector, "obj", None)
    if getattr(obj, "__module__", None) != getattr(module, "__name__", object()):
        return None  # imported from elsewhere under another name: its own module collects it
    raise pytest.Collector.CollectError(
        uncollected_function_message(name, collector.nodeid, collector.config.getini("python_functions")))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Missing or empty datasets end as a usage error (exit 4); no task at all says why."""
    run = _run(session.config)
    if run is None:
        return
    errors = session.config.stash.get(_DATASET_ERRORS, [])
    if errors:
        raise pytest.UsageError("\n".join(errors))
    if not _task_items(session.items) and not any(task_spec(getattr(i, "function", None)) for i in session.items):
        config = session.config
        roots = [Path(config.invocation_params.dir, arg.split("::")[0]) for arg in config.args]
        for line in no_tasks_message(run.mode, roots, config.getini("python_files"),
                                     config.getini("python_functions")):
            config.get_terminal_writer().line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    run = _run(session.config)
    if run is not None and not session.config.option.collectonly:
        try:
            run.start(_task_items(sharding.local_items(session.config, session.items)))
        except (MissingDependencyError, ModelError) as exc:  # no torch, no such model: the message alone
            raise pytest.UsageError(f"agentcore-rl {run.mode}: {exc}") from exc
    return (yield)


def _task_items(items: list[pytest.Item]) -> list[tuple[str, Any]]:
    found = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and CASE_FIXTURE in callspec.params:
            found.append((item.nodeid, callspec.params[CASE_FIXTURE]))
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    run = _run(pyfuncitem.config)
    if run is None or task_spec(pyfuncitem.function) is None:
        return None
    call_task(run, pyfuncitem)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    run = _run(item.config)
    if run is not None:
        record_report(run, item, report, call)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = _run(session.config)
    if run is None:
        return
    session.exitstatus = finish_session(run, session, int(exitstatus))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    run = _run(terminalreporter.config)
    if run is not None:
        for line in run.summary_lines():
            terminalreporter.write_line(line)
