"""One pytest session under `--agentcore-rl`: config, run directory, rollouts, records, reports.

The plugin calls into `RunSession`; `RunSession` drives the `Harness` (runner) and the
`RunStore` (run directory). It is the only place that knows both pytest items and rollouts.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from .config import ComposedConfig, compose_config, default_config_source
from .errors import ConfigError, HarnessError
from .records import Rollout, Status, Trace, Usage
from .reports.build import summarize, summarize_by_task
from .reports.model import Report, RunInfo
from .reports import render
from .runner import Case, Episode, Harness
from .store import RunStore, default_run_dir
from .tasks import TaskSpec, load_rows

MODES = ("eval", "collect", "train", "run")
IMPLEMENTED_MODES = ("eval", "collect")
SESSION_KEY = pytest.StashKey["RunSession"]()
ERROR_TEXT_LIMIT = 4000
PROGRESS_EVERY_S = 15.0


class RolloutHandle:
    """What a task test sees as `rollout`: the finished episode, scorable and overridable."""

    def __init__(self, episode: Episode) -> None:
        self._episode = episode
        self.session_id = episode.session_id
        self.row_id = episode.case.row_id
        self.sample_index = episode.case.sample_index
        self.status: Status = episode.outcome.status
        self.error = episode.outcome.error
        self.result: dict[str, Any] = dict(episode.outcome.result or {})
        self.traces: tuple[Trace, ...] = episode.traces
        self.turns = episode.turns
        self.usage: Usage = episode.usage
        self.elapsed_s = episode.outcome.elapsed_s
        self.rewards: dict[str, float] = {}
        self.reward: float | None = None

    def __repr__(self) -> str:
        return (
            f"<rollout {self.row_id} s{self.sample_index} status={self.status.value} "
            f"reward={self.reward} turns={self.turns}>"
        )


@dataclass
class _Pending:
    case: Case
    future: concurrent.futures.Future[Episode]
    handle: RolloutHandle | None = None
    recorded: bool = False


@dataclass
class RunSession:
    mode: str
    config: ComposedConfig
    store: RunStore
    rootdir: Path
    write: Callable[[str], None]
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    started_monotonic: float = field(default_factory=time.monotonic)
    harness: Harness | None = None
    pending: dict[str, _Pending] = field(default_factory=dict)
    rollouts: list[Rollout] = field(default_factory=list)
    infra_errors: int = 0
    other_failures: int = 0
    gate_failures: list[str] = field(default_factory=list)
    report: Report | None = None

    @classmethod
    def create(
        cls,
        *,
        mode: str,
        overrides: list[str],
        config_path: Path | None,
        out_dir: Path | None,
        rootdir: Path,
        write: Callable[[str], None],
    ) -> "RunSession":
        if mode not in IMPLEMENTED_MODES:
            raise ConfigError(
                f"--agentcore-rl {mode}: this version implements {', '.join(IMPLEMENTED_MODES)};"
                " training modes (train, run) arrive with the embedded trainer"
            )
        source = config_path if config_path is not None else default_config_source(rootdir)
        composed = compose_config(overrides, source=source)
        run_dir = out_dir if out_dir is not None else default_run_dir(mode, rootdir)
        store = RunStore(run_dir)
        store.write_config(composed.resolved)
        return cls(mode=mode, config=composed, store=store, rootdir=rootdir, write=write)

    @property
    def phase(self) -> str:
        return self.mode

    @property
    def split(self) -> str:
        return "train" if self.mode == "collect" else self.config.typed.eval.split

    def cases_for(self, spec: TaskSpec) -> list[Case]:
        rows = load_rows(spec, self.split)
        if not rows:
            raise HarnessError(f"task {spec.name}: dataset {spec.dataset} has no {self.split!r} rows")
        limit = self.config.typed.eval.max_rows
        if limit is not None:
            rows = rows[:limit]
        samples = self.config.typed.eval.samples or spec.samples
        return [
            Case(spec=spec, row=row, sample_index=index, phase=self.phase)
            for row in rows
            for index in range(samples)
        ]

    def start_rollouts(self, items: list[tuple[str, Case]]) -> None:
        if not items:
            return
        self.harness = Harness(self.config.typed, progress=self.write)
        self.write(
            f"agentcore-rl {self.mode}: {len(items)} rollouts, run directory {self.store.run_dir}"
        )
        self.harness.start()
        for nodeid, case in items:
            self.pending[nodeid] = _Pending(case=case, future=self.harness.submit(case))

    def rollout_for(self, nodeid: str) -> RolloutHandle:
        pending = self.pending.get(nodeid)
        if pending is None:
            raise HarnessError(f"no rollout was scheduled for {nodeid}")
        if pending.handle is None:
            pending.handle = RolloutHandle(self._wait(nodeid, pending.future))
        return pending.handle

    def _wait(self, nodeid: str, future: concurrent.futures.Future[Episode]) -> Episode:
        """Wait for one rollout, printing a progress line every PROGRESS_EVERY_S seconds."""
        while True:
            try:
                return future.result(timeout=PROGRESS_EVERY_S)
            except concurrent.futures.TimeoutError:
                self.write(self.progress_line(waiting_for=nodeid))

    def progress_line(self, *, waiting_for: str | None = None) -> str:
        done = sum(1 for p in self.pending.values() if p.future.done())
        elapsed = time.monotonic() - self.started_monotonic
        live = self.harness.live_sessions() if self.harness else 0
        line = (
            f"agentcore-rl: {done}/{len(self.pending)} rollouts finished, {live} live, "
            f"{elapsed:.0f}s elapsed"
        )
        return f"{line} (waiting for {waiting_for})" if waiting_for else line

    def call_task(self, nodeid: str, function: Callable[..., Any], arguments: dict) -> None:
        """Fail agent-side failures, score the rewards, then run the test body."""
        handle = self.rollout_for(nodeid)
        if handle.status is Status.INFRA_ERROR:
            raise HarnessError(f"infrastructure error in rollout: {handle.error}")
        if handle.status is not Status.COMPLETED:
            pytest.fail(f"{handle.status.value}: {handle.error}", pytrace=False)
        row = self.pending[nodeid].case.row
        spec = self.pending[nodeid].case.spec
        total = 0.0
        for reward_fn in spec.rewards:
            value = self._call(reward_fn.fn, handle, dict(row))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"reward {reward_fn.name} returned {value!r}; a reward must be a number"
                )
            handle.rewards[reward_fn.name] = float(value)
            total += reward_fn.weight * float(value)
        if spec.rewards:
            handle.reward = total
        self._call(function, **arguments)

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(function):
            assert self.harness is not None
            return self.harness.loop.run(function(*args, **kwargs))
        value = function(*args, **kwargs)
        if inspect.isawaitable(value):
            assert self.harness is not None

            async def _await() -> Any:
                return await value

            return self.harness.loop.run(_await())
        return value

    def on_report(self, nodeid: str, report: pytest.TestReport, call: pytest.CallInfo) -> None:
        pending = self.pending.get(nodeid)
        if pending is None:
            if report.failed:
                self.other_failures += 1
            return
        if pending.recorded or report.when == "teardown" and report.passed:
            return
        if report.when == "setup" and report.passed:
            return
        if report.skipped:
            return
        pending.recorded = True
        episode, failure = _episode_or_failure(pending.future)
        if episode is None:
            self.infra_errors += 1
            self._record_infra(pending.case, failure)
            return
        handle = pending.handle or RolloutHandle(episode)
        status = handle.status
        error = handle.error
        if status is Status.INFRA_ERROR:
            self.infra_errors += 1
        if status is Status.COMPLETED and not report.passed:
            status = Status.TASK_FAILED
            error = _error_text(call)
        success = report.passed if status in (Status.COMPLETED, Status.TASK_FAILED) else False
        rollout = Rollout(
            run_id=self.store.run_dir.name,
            task=pending.case.spec.name,
            row_id=pending.case.row_id,
            sample_index=pending.case.sample_index,
            group_id=pending.case.group_id,
            phase=self.phase,
            step=None,
            session_id=episode.session_id,
            status=status,
            error=error,
            reward=handle.reward,
            rewards=dict(handle.rewards),
            success=success,
            result=episode.outcome.result,
            turns=episode.turns,
            usage=episode.usage,
            elapsed_s=round(episode.outcome.elapsed_s, 3),
            traces=episode.traces,
        )
        self.store.append(rollout)
        self.rollouts.append(rollout)

    def _record_infra(self, case: Case, error: str) -> None:
        rollout = Rollout(
            run_id=self.store.run_dir.name,
            task=case.spec.name,
            row_id=case.row_id,
            sample_index=case.sample_index,
            group_id=case.group_id,
            phase=self.phase,
            step=None,
            session_id="",
            status=Status.INFRA_ERROR,
            error=error[:ERROR_TEXT_LIMIT],
            reward=None,
            rewards={},
            success=None,
            result=None,
            turns=0,
            usage=Usage(),
            elapsed_s=0.0,
            traces=(),
        )
        self.store.append(rollout)
        self.rollouts.append(rollout)

    def harness_gateway(self) -> Any:
        if self.harness is None:
            self.harness = Harness(self.config.typed, progress=self.write)
        self.harness.start()
        return self.harness.gateway

    def extra_sessions(self, case: Case) -> "ExtraSessions":
        self.harness_gateway()
        assert self.harness is not None
        return ExtraSessions(self.harness, case)

    def finish(self, exitstatus: int, *, write_reports: bool = True) -> int:
        for pending in self.pending.values():
            pending.future.cancel()
        try:
            if self.harness is not None:
                self.harness.close()
        finally:
            self.store.close()
        if not write_reports:
            return exitstatus
        self.report = self._build_report()
        render.write_reports(self.store.run_dir, self.report, self.rollouts)
        if self.mode == "collect" and self.rollouts:
            self._save_dataset()
        self._check_gates()
        if exitstatus == pytest.ExitCode.TESTS_FAILED and not (
            self.infra_errors or self.other_failures or self.gate_failures
        ):
            return pytest.ExitCode.OK
        if self.gate_failures and exitstatus == pytest.ExitCode.OK:
            return pytest.ExitCode.TESTS_FAILED
        return exitstatus

    def _build_report(self) -> Report:
        return Report(
            run=RunInfo(
                id=self.store.run_dir.name,
                mode=self.mode,
                config=self.config.resolved,
                overrides=list(self.config.overrides),
                versions=self.harness.versions() if self.harness else {},
                git_sha=_git_sha(self.rootdir),
                started_at=self.started_at.isoformat(),
                wall_time_s=round(time.monotonic() - self.started_monotonic, 3),
            ),
            overall=summarize(self.rollouts),
            tasks=summarize_by_task(self.rollouts),
        )

    def _check_gates(self) -> None:
        threshold = self.config.typed.gates.min_success_rate
        value = self.report.overall.success_rate.value if self.report else None
        if threshold is not None and (value is None or value < threshold):
            shown = "n/a" if value is None else f"{value:.3f}"
            self.gate_failures.append(
                f"gates.min_success_rate: overall success {shown} < {threshold:.3f}"
            )

    def _save_dataset(self) -> None:
        from datasets import Dataset

        records = [r.to_json() for r in self.rollouts if r.status is not Status.INFRA_ERROR]
        if records:
            Dataset.from_list(records).to_parquet(str(self.store.run_dir / "rollouts.parquet"))

    def summary_lines(self) -> list[str]:
        if self.report is None:
            return []
        lines = [
            f"agentcore-rl {self.mode}: {render.verdict(self.report.overall)}",
            f"agentcore-rl run directory: {self.store.run_dir}",
        ]
        if self.infra_errors:
            lines.append(f"agentcore-rl: {self.infra_errors} infrastructure error(s): exit 1")
        lines += [f"agentcore-rl gate FAILED: {failure}" for failure in self.gate_failures]
        return lines


class ExtraSessions:
    """Open extra agent sessions by hand from a task test (e.g. a second opinion)."""

    def __init__(self, harness: Harness, case: Case) -> None:
        self._harness = harness
        self._case = case

    def run(self, row: dict[str, Any] | None = None) -> RolloutHandle:
        """Run the task's agent once more on `row` (default: this case's row)."""
        case = self._case if row is None else Case(
            spec=self._case.spec, row={"id": self._case.row_id, **row},
            sample_index=self._case.sample_index, phase=self._case.phase,
        )
        return RolloutHandle(self._harness.loop.run(self._harness.run_case(case)))


def _episode_or_failure(
    future: concurrent.futures.Future[Episode],
) -> tuple[Episode | None, str]:
    if not future.done():
        return None, "rollout did not finish"
    if future.cancelled():
        return None, "rollout was cancelled"
    exc = future.exception()
    if exc is not None:
        return None, f"{type(exc).__name__}: {exc}"
    return future.result(), ""


def _error_text(call: pytest.CallInfo) -> str | None:
    if call.excinfo is None:
        return None
    return call.excinfo.exconly()[:ERROR_TEXT_LIMIT]


def _git_sha(rootdir: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=rootdir, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None

