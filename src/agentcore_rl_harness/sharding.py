"""`pytest -n N --agentcore-rl eval|collect`: one run over several pytest-xdist worker processes.

The controller (the process you started) owns the run directory and is its one writer. It composes
the config once and hands it to every worker (`workerinput`); it appends each rollout a worker
scored to rollouts.jsonl when that item's report arrives (one whole line, flushed, from one
process), and at the end writes report.json/md/html and junit.xml over all of them, in collection
order, as one process would.

Each worker rolls out and scores a fixed share of the collected items: item `i` goes to worker
`i mod N`. The share is known before any item runs, so a worker submits all of its rollouts at once,
as a single process does with all of them; the controller's scheduler (`ShardScheduling`) sends
each worker exactly that share, whatever `--dist load` would have chosen. A worker writes nothing:
its records ride on its items' reports, its counts on its `workeroutput`.

A worker that dies takes its unfinished items with it: xdist's replacement gets no items, the run
exits 1 with what was collected kept, and `--agentcore-rl-resume DIR` (with or without -n) redoes
the rest. Training (`train`, `run`) is refused: every group must reach one trainer, which updates
the one policy the post-eval samples from.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .records import Rollout
from .run.core import Run
from .run.options import RunOptions

WORKER_INPUT = "agentcore_rl"  # workerinput / workeroutput key
REPORT_ROLLOUTS = "agentcore_rl_rollouts"  # TestReport attribute: the item's records (JSON lines)
SHARDED_MODES = ("eval", "collect")


def role(config: pytest.Config) -> str | None:
    """'worker' in an xdist worker, 'controller' where xdist distributes, else None."""
    if hasattr(config, "workerinput"):
        return "worker"
    distributing = config.pluginmanager.hasplugin("xdist") and not config.option.collectonly and (
        config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    )
    return "controller" if distributing else None


def check_controller(config: pytest.Config, mode: str) -> None:
    """Under -n, the modes and `--dist` that keep one run: a UsageError for the others."""
    if mode not in SHARDED_MODES:
        raise pytest.UsageError(
            f"--agentcore-rl {mode} does not run under pytest-xdist (-n / --dist): training "
            "updates one policy in one process, and every group of every step must reach that "
            f"trainer. Use -n with {' or '.join(SHARDED_MODES)}; train without -n (the harness "
            "already runs a step's rollouts concurrently: runtime.concurrency), or pass -n 0 if "
            "your addopts set it"
        )
    dist = config.getoption("dist", "no")
    if dist != "load":
        raise pytest.UsageError(
            f"--dist {dist}: under --agentcore-rl the harness shares the items among the workers "
            "itself (item i to worker i mod N, so each worker starts its rollouts at once); drop "
            "--dist or pass --dist load"
        )


def controller_line(config: pytest.Config, run: Run) -> str:
    """What the controller says first: where the run goes and who fills it."""
    from xdist.workermanage import parse_tx_spec_config  # a controller: xdist is loaded

    return (f"agentcore-rl {run.mode}: run directory {run.run_dir}; rollouts from "
            f"{len(parse_tx_spec_config(config))} pytest-xdist workers, each with its own gateway "
            "and sessions (and its own copy of an in-process model)")


def worker_setup(config: pytest.Config) -> dict[str, Any]:
    """What the controller handed this worker (run directory, config, share)."""
    setup = config.workerinput.get(WORKER_INPUT)  # type: ignore[attr-defined]
    if setup is None:
        raise pytest.UsageError(
            "--agentcore-rl in an xdist worker whose controller did not load the agentcore-rl "
            "plugin; run the controller with the plugin (do not pass -p no:agentcore_rl)"
        )
    return setup


def attached_run(config: pytest.Config, options: RunOptions, terminal: Any) -> Run:
    """This worker's share of the controller's run (with the controller's overrides)."""
    setup = worker_setup(config)
    return Run.attach(dataclasses.replace(options, overrides=tuple(setup["overrides"])),
                      run_dir=Path(setup["run_dir"]), resolved=setup["resolved"], resumed=setup["resumed"],
                      terminal=terminal)


def shard_indices(count: int, shard: int, shards: int) -> list[int]:
    """The collection indices one worker runs: every `shards`-th item from `shard`."""
    return list(range(shard, count, shards))


def _share(setup: dict[str, Any], count: int) -> list[int]:
    """A worker's share of `count` collected items (none for a replacement of a dead worker)."""
    return [] if setup["shard"] is None else shard_indices(count, setup["shard"], setup["shards"])


def node_share(node: Any, count: int) -> list[int]:
    """The collection indices the controller sends one worker."""
    return _share(node.workerinput[WORKER_INPUT], count)


def local_items(config: pytest.Config, items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """The items this process runs: all of them, or in a worker its share."""
    if not hasattr(config, "workerinput"):
        return list(items)
    return [items[i] for i in _share(worker_setup(config), len(items))]


class ShardController:
    """The controller's side: hands out the config and shares, writes what workers send."""

    def __init__(self, run: Run, *, resumed: bool) -> None:
        self._run = run
        self._resumed = resumed
        self._configured = 0
        self._collection: list[str] = []
        self._received: dict[str, list[Rollout]] = {}
        self._down: set[str] = set()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        shards = int(node.workerinput["workercount"])
        shard = self._configured if self._configured < shards else None  # None: a replacement
        self._configured += 1
        config = self._run.config
        node.workerinput[WORKER_INPUT] = {
            "run_dir": str(self._run.run_dir), "resolved": config.resolved,
            "overrides": list(config.overrides), "resumed": self._resumed,
            "shard": shard, "shards": shards,
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from ._shard_scheduling import ShardScheduling  # xdist is loaded: this hook is its

        return ShardScheduling(config, log, share=node_share)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        if not self._collection:
            self._collection = list(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        lines = report.__dict__.pop(REPORT_ROLLOUTS, None)  # not kept on the report: traces are big
        for line in lines or ():
            rollout = self._run.record_received(Rollout.from_json(json.loads(line)))
            self._received.setdefault(report.nodeid, []).append(rollout)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        name = node.gateway.id
        if name in self._down:
            return
        self._down.add(name)
        output = getattr(node, "workeroutput", {}).get(WORKER_INPUT)
        run = self._run
        if output is not None:
            run.add_worker_counts(infra_errors=int(output["infra_errors"]),
                                  other_failures=int(output["other_failures"]), tags=output["tags"])
        if error is not None or output is None:
            run.worker_lost(f"agentcore-rl: worker {name} stopped before its share of the items finished "
                            f"({error or 'no result'}); what it sent is kept in {run.run_dir}: redo the "
                            f"rest with --agentcore-rl-resume {run.run_dir}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """Before the run finishes: its rollouts in collection order, as one process has them."""
        order = {nodeid: index for index, nodeid in enumerate(self._collection)}
        position = {id(rollout): order.get(nodeid, len(order)) for nodeid, rollouts in self._received.items()
                    for rollout in rollouts}  # the rollouts a resume kept stay first
        self._run.order_rollouts(lambda rollout: position.get(id(rollout), -1))


class ShardWorker:
    """A worker's side: its items' records ride on their reports, its counts on workeroutput."""

    def __init__(self, run: Run) -> None:
        self._run = run

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after plugin.py recorded the item
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        report = yield
        lines = self._run.rundir.store.drain()
        if lines:
            setattr(report, REPORT_ROLLOUTS, lines)
        return report

    @pytest.hookimpl(trylast=True)  # after xdist serialized the report for the controller
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        report.__dict__.pop(REPORT_ROLLOUTS, None)

    @pytest.hookimpl(trylast=True)  # after plugin.py finished the run (its counts are final)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        session.config.workeroutput[WORKER_INPUT] = self._run.worker_counts()  # type: ignore[attr-defined]
