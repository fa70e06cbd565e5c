"""The pytest plugin's entry: options, `pytest_configure`, the run-independent collection hooks.
The fixtures live in `fixtures.py` and are re-exported here, where pytest finds them.

`pytest_configure` converts the options once (`run_options.py`) and, with `--agentcore-rl`, makes
the run and registers its hooks (`run_hooks.RunHooks`): each task expands into (row x sample)
items whose rollouts start together when the test loop starts, and each item waits for its own
rollout. Without it, `run_hooks.TasksSkipped` collects each task as one skipped item and ordinary
tests are untouched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import interrupts, sharding
from .errors import ConfigError, HarnessError
from .fixtures import (  # noqa: F401
    _arl_case, agentcore_rl_config, agentcore_session, backend, gateway, rollout, row, sandbox,
)
from .progress import PytestTerminal
from .pytest_outcomes import RUN_KEY
from .run.core import Run
from .run.plan import MODES
from .run_hooks import FailureLines, ProgressHooks, RunHooks, TasksSkipped
from .run_options import run_options
from .task_collection import uncollected_function_message
from .tasks import task_spec

# The plugin objects pytest_configure registers for one session (and pytest_unconfigure drops).
PER_RUN_PLUGINS = ("agentcore-rl-run", "agentcore-rl-tasks-skipped", "agentcore-rl-progress",
                   "agentcore-rl-failure-lines", "agentcore-rl-shard")


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
    options = run_options(config)
    if options is None:
        config.pluginmanager.register(TasksSkipped(), "agentcore-rl-tasks-skipped")
        return
    where = sharding.role(config)  # under pytest -n: 'controller' or 'worker'
    if where == "controller":
        sharding.check_controller(config, options.mode)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    terminal = PytestTerminal(reporter) if reporter is not None else None
    try:
        run = (sharding.attached_run(config, options, terminal) if where == "worker"
               else Run.made(options, terminal=terminal))
    except ConfigError as exc:
        raise pytest.UsageError(f"agentcore-rl config: {exc}") from exc
    except HarnessError as exc:
        raise pytest.UsageError(f"agentcore-rl: {exc}") from exc
    regression = run.config.typed.gates.max_regression
    if regression and options.compare is None:
        raise pytest.UsageError(
            f"gates.max_regression={regression} judges this run against a baseline: pass "
            "--agentcore-rl-compare BASELINE (a run directory, report.json or a name saved with "
            "--agentcore-rl-save-baseline), or drop the gate with --agentcore-rl-set "
            "gates.max_regression=null"
        )
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(RunHooks(run), "agentcore-rl-run")
    config.pluginmanager.register(ProgressHooks(run), "agentcore-rl-progress")
    if config.option.verbose < 1:  # pytest -v keeps pytest's full block per failed rollout
        config.pluginmanager.register(FailureLines(run), "agentcore-rl-failure-lines")
    if where == "controller":
        if options.resume:
            run.reload()  # before the workers start: they read what it keeps
        config.pluginmanager.register(sharding.ShardController(run, resumed=bool(options.resume)),
                                      "agentcore-rl-shard")
        run.write(sharding.controller_line(config, run))
    elif where == "worker":
        config.pluginmanager.register(sharding.ShardWorker(run), "agentcore-rl-shard")
    handlers = interrupts.install(run.options.resume_command(run.run_dir))  # Ctrl-C, SIGTERM: a clean stop; a second exits now
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


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's plugin objects go with the session that registered them (`pytester` runs
    several sessions in one process)."""
    for name in PER_RUN_PLUGINS:
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
    if RUN_KEY in config.stash:
        del config.stash[RUN_KEY]
