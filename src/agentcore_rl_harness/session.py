"""One pytest session under `--agentcore-rl`: config, run directory, rollouts, records, reports.

The plugin calls into `RunSession`; `RunSession` drives the `Harness` (runner), the training loop
and the `RunStore` (run directory). It is the only place that knows both pytest items and
rollouts. Modes and what the pytest items are:

    eval     items = test-split cases                 (phase "eval")
    collect  items = train-split cases, also parquet  (phase "collect")
    run      pre-eval of the item cases (phase "pre") -> training -> items = post-eval ("post")
    train    training only; one item per task that passes when training finished
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from .config import ComposedConfig, ReportConfig, compose_config, default_config_source
from .errors import ERROR_TEXT_LIMIT, HarnessError
from .progress import POLL_S, Progress, Terminal, choose_style
from .records import Rollout, Status
from .reports import render
from .reports.build import build_report
from .reports.compare import check_gates
from .reports.load import load_report, read_discarded
from .reports.model import Report
from .run.sanity import check_task
from .runner import Case, Episode, Harness
from .scoring import (
    RolloutHandle, Verdict, apply_rewards, check_handle_rewards, drop_bad_rewards, failure_text,
    make_rollout, score_offline,
)
from .store import RunStore, default_run_dir, json_safe, read_rollouts, write_parquet
from .tasks import TaskSpec, load_rows

MODES = ("eval", "collect", "train", "run")
SESSION_KEY = pytest.StashKey["RunSession"]()
from .reports.model import ITEM_PHASE  # noqa: E402  (the phase of the pytest items per mode)


@dataclass(frozen=True)
class TrainItem:
    """The one pytest item of a task in `train` mode: it passes when training finished."""

    spec: TaskSpec


@dataclass
class _Pending:
    case: Case
    future: concurrent.futures.Future[Episode]
    handle: RolloutHandle | None = None
    recorded: bool = False
    rollout: Rollout | None = None  # as recorded in rollouts.jsonl


@dataclass
class RunSession:
    mode: str
    config: ComposedConfig
    run_dir: Path  # created with the first rollout (`open_run_dir`): --collect-only writes nothing
    rootdir: Path
    progress: Progress
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    started_monotonic: float = field(default_factory=time.monotonic)
    harness: Harness | None = None
    pending: dict[str, _Pending] = field(default_factory=dict)
    train_items: set[str] = field(default_factory=set)
    rollouts: list[Rollout] = field(default_factory=list)
    train_steps: list[dict[str, Any]] = field(default_factory=list)
    training_error: str | None = None
    infra_errors: int = 0
    other_failures: int = 0
    gate_failures: list[str] = field(default_factory=list)
    report: Report | None = None
    resumed: list[Rollout] | None = None
    replayed: dict[str, Rollout] = field(default_factory=dict)
    specs: dict[str, TaskSpec] = field(default_factory=dict)
    compare_path: Path | None = None
    save_baseline: str | None = None
    train_steps_total: int | None = None
    _store: RunStore | None = None

    @property
    def store(self) -> RunStore:
        return self._store if self._store is not None else self.open_run_dir()

    def open_run_dir(self) -> RunStore:
        """Create the run directory (config.yaml, run.json, rollouts.jsonl) if not yet done."""
        if self._store is None:
            store = RunStore(self.run_dir)
            store.write_config(self.config.resolved)
            store.write_run_info({"mode": self.mode, "overrides": list(self.config.overrides)})
            self._store = store
        return self._store

    @property
    def write(self) -> Callable[[str], None]:
        """Write one whole line (the progress status line is cleared first)."""
        return self.progress.message

    @classmethod
    def create(
        cls,
        *,
        mode: str,
        overrides: list[str],
        config_path: Path | None,
        out_dir: Path | None,
        rootdir: Path,
        terminal: Terminal | None,
    ) -> "RunSession":
        source = config_path if config_path is not None else default_config_source(rootdir)
        composed = compose_config(overrides, source=source)
        run_dir = out_dir if out_dir is not None else default_run_dir(mode, rootdir)
        return cls(mode=mode, config=composed, run_dir=Path(run_dir).resolve(), rootdir=rootdir,
                   progress=_progress(composed.typed.report, terminal))

    @classmethod
    def resume(
        cls, *, mode: str, run_dir: Path, overrides: list[str], rootdir: Path,
        terminal: Terminal | None,
    ) -> "RunSession":
        """Reopen a stopped run: its config.yaml, its finished rollouts, its checkpoints."""
        run_dir = Path(run_dir).resolve()
        if not (run_dir / "config.yaml").is_file():
            raise HarnessError(f"--agentcore-rl-resume {run_dir}: no config.yaml, not a run directory")
        store = RunStore(run_dir)
        info = store.read_run_info()
        recorded_mode = info["mode"]
        if recorded_mode != mode:
            raise HarnessError(
                f"--agentcore-rl-resume {run_dir}: that is a {recorded_mode!r} run; resume it with "
                f"--agentcore-rl {recorded_mode}"
            )
        # config.yaml already holds the original overrides; only new ones are applied on top.
        original = list(info.get("overrides", []))
        extra = [o for o in overrides if o not in original]
        composed = compose_config(extra, source=run_dir / "config.yaml")
        # The report names every override the run was made with, as an uninterrupted run would.
        composed = dataclasses.replace(composed, overrides=(*original, *extra))
        if extra:
            store.write_run_info({**info, "overrides": [*original, *extra]})
        session = cls(mode=mode, config=composed, run_dir=run_dir, rootdir=rootdir,
                      progress=_progress(composed.typed.report, terminal), _store=store)
        session.resumed = read_rollouts(run_dir)
        return session

    @property
    def phase(self) -> str:
        return ITEM_PHASE[self.mode]

    @property
    def split(self) -> str:
        return "train" if self.mode == "collect" else self.config.typed.eval.split

    def cases_for(self, spec: TaskSpec) -> list[Any]:
        check_task(spec, self.config.typed.agent)
        self.specs[spec.name] = spec
        if self.mode == "train":
            return [TrainItem(spec)]
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

    # -- running ---------------------------------------------------------------------------

    def start_rollouts(self, items: list[tuple[str, Any]]) -> None:
        if not items:
            return
        self.harness = Harness(self.config.typed, progress=self.write, private_dirs=(self.run_dir,))
        cases = [case for _, case in items if isinstance(case, Case)]
        self.write(f"agentcore-rl {self.mode}: run directory {self.run_dir}")
        self.harness.start()  # first: a missing dependency or model leaves no run directory behind
        self.open_run_dir()
        start_step = self._reload() if self.resumed is not None else 0
        if self.mode in ("run", "train"):
            specs = list({id(case.spec): case.spec for _, case in items}.values())
            self._train_first(specs, cases, start_step)
        done = {_key(r): r for r in self.rollouts if r.phase == self.phase}
        for nodeid, case in items:
            if isinstance(case, TrainItem):
                self.train_items.add(nodeid)
            elif _key(case) in done:
                self.replayed[nodeid] = done[_key(case)]
            else:
                self.pending[nodeid] = _Pending(case=case, future=self.harness.submit(case))
        if self.replayed:
            self.write(f"agentcore-rl resume: {len(self.replayed)} finished rollouts kept")
        if self.pending:
            self.write(f"agentcore-rl {self.phase}: {len(self.pending)} rollouts")
        total = len(self.pending) + len(self.replayed)
        if total:
            self.progress.begin_phase(self.phase, total, already_done=len(self.replayed))
            for rollout in self.replayed.values():
                self.progress.rollout_scored(rollout.success)
            for pending in self.pending.values():
                pending.future.add_done_callback(self._finished)

    def _reload(self) -> int:
        """Keep finished rollouts of a resumed run; return the training step to continue from."""
        from .train_store import latest_checkpoint, read_steps, rewrite_steps

        assert self.resumed is not None and self.harness is not None
        checkpoint = latest_checkpoint(self.run_dir)
        start_step = checkpoint[0] if checkpoint else 0

        def stale(rollout: Rollout) -> bool:
            if rollout.status is Status.INFRA_ERROR:
                return True
            return rollout.phase == "train" and (rollout.step or 0) >= start_step

        keep = [r for r in self.resumed if not stale(r)]
        self.store.rewrite(keep, [r for r in self.resumed if stale(r)])
        self.rollouts = keep
        rewrite_steps(self.run_dir, before=start_step)
        self.train_steps = read_steps(self.run_dir)
        if checkpoint and self.mode in ("run", "train"):
            self.harness.trainer().load_checkpoint(checkpoint[1])
        self.write(
            f"agentcore-rl resume: {len(keep)} rollouts kept, training continues at step "
            f"{start_step}"
        )
        return start_step

    def _train_first(self, specs: list[TaskSpec], cases: list[Case], start_step: int) -> None:
        from .training import TrainingLoop

        assert self.harness is not None
        try:
            if self.mode == "run":
                done = {_key(r) for r in self.rollouts if r.phase == "pre"}
                pre = [dataclasses.replace(case, phase="pre") for case in cases]
                pre = [case for case in pre if _key(case) not in done]
                if pre:
                    self.write(f"agentcore-rl pre-eval: {len(pre)} rollouts")
                    self._offline_phase(pre)
            plan = self.harness.train_plan()
            self.train_steps_total = plan.steps
            if start_step >= plan.steps:
                return
            trainer = self.harness.trainer()
            loop = TrainingLoop(
                plan=plan,
                specs=specs,
                run_cases=self._run_cases,
                score=self._score_offline,
                trainer=trainer,
                run_dir=self.run_dir,
                write=self.write,
                start_step=start_step,
            )
            self.train_steps += loop.run(lambda groups: self.harness.loop.run(trainer.step(groups=groups)))
        except (HarnessError, ValueError, RuntimeError, OSError) as exc:
            self.training_error = f"{type(exc).__name__}: {exc}"
            self.infra_errors += 1
            self.write(f"agentcore-rl: training failed: {self.training_error}")

    def _offline_phase(self, cases: list[Case]) -> list[Rollout]:
        episodes = self._run_cases(cases)
        rollouts = [self._score_offline(case, episode) for case, episode in zip(cases, episodes)]
        self._tick(force=True)  # the phase's line with its success rate
        return rollouts

    def _run_cases(self, cases: list[Case]) -> list[Episode]:
        """Roll out a batch of cases (pre-eval, one training step), showing progress meanwhile."""
        assert self.harness is not None
        if cases:
            step = cases[0].step
            self.progress.begin_phase(
                cases[0].phase, len(cases), step=step,
                steps=self.train_steps_total if step is not None else None,
            )
        futures = [self.harness.submit(case) for case in cases]
        for future in futures:
            future.add_done_callback(self._finished)
        waiting = concurrent.futures.wait(futures, timeout=POLL_S)
        while waiting.not_done:
            self._tick(waiting=True)
            waiting = concurrent.futures.wait(futures, timeout=POLL_S)
        return [future.result() for future in futures]

    def _finished(self, future: concurrent.futures.Future[Episode]) -> None:
        """Count a finished rollout and its sampled tokens (runs on the harness's loop thread)."""
        episode, _ = _episode_or_failure(future)
        self.progress.rollout_finished(episode.usage.completion_tokens if episode else 0)

    def _tick(self, *, waiting: bool = False, force: bool = False) -> None:
        live = self.harness.live_sessions() if self.harness else 0
        self.progress.tick(live, waiting=waiting, force=force)

    def _score_offline(self, case: Case, episode: Episode) -> Rollout:
        handle = RolloutHandle(episode)
        fixtures = {"agentcore_rl_config": self.config.typed, "gateway": self.harness_gateway(),
                    "backend": self.harness.backend()}
        verdict = score_offline(case, handle, self._call, fixtures)
        rollout = make_rollout(
            run_id=self.run_dir.name, case=case, episode=episode, handle=handle,
            verdict=verdict, step=case.step,
        )
        self._record(rollout)
        return rollout

    def _record(self, rollout: Rollout) -> Rollout:
        rollout = self.store.append(rollout)  # as written: an unstorable value fails the rollout
        self.rollouts.append(rollout)
        self.progress.rollout_scored(rollout.success)
        return rollout

    # -- pytest items ----------------------------------------------------------------------

    def rollout_for(self, nodeid: str) -> RolloutHandle:
        if nodeid in self.replayed:
            return RolloutHandle.from_record(self.replayed[nodeid])
        pending = self.pending.get(nodeid)
        if pending is None:
            raise HarnessError(f"no rollout was scheduled for {nodeid}")
        if pending.handle is None:
            pending.handle = RolloutHandle(self._wait(nodeid, pending.future))
        return pending.handle

    def _wait(self, nodeid: str, future: concurrent.futures.Future[Episode]) -> Episode:
        """Wait for one rollout, keeping the progress display going meanwhile."""
        while True:
            try:
                return future.result(timeout=POLL_S)
            except concurrent.futures.TimeoutError:
                self._tick(waiting=True)

    def call_task(self, nodeid: str, function: Callable[..., Any], arguments: dict) -> None:
        """Fail agent-side failures, score the rewards, then run the test body."""
        if nodeid in self.train_items:
            if self.training_error:
                raise HarnessError(f"training failed: {self.training_error}")
            return
        if self.training_error:
            raise HarnessError(f"training failed, post-eval is meaningless: {self.training_error}")
        if nodeid in self.replayed:  # finished before the resume: report its recorded verdict
            recorded = self.replayed[nodeid]
            if not recorded.success:
                pytest.fail(f"{recorded.status.value} (recorded): {recorded.error}", pytrace=False)
            return
        handle = self.rollout_for(nodeid)
        if handle.status is Status.INFRA_ERROR:
            raise HarnessError(f"infrastructure error in rollout: {handle.error}")
        if handle.status is not Status.COMPLETED:
            pytest.fail(f"{handle.status.value}: {handle.error}", pytrace=False)
        unstorable: list[str] = []
        json_safe(handle.result, "result", unstorable)
        if unstorable:  # the record could not hold it: fail here, as the record will say
            pytest.fail("the agent's result holds values strict JSON cannot store: "
                        + "; ".join(unstorable), pytrace=False)
        apply_rewards(handle, self.pending[nodeid].case, self._call)
        self._call(function, **arguments)
        check_handle_rewards(handle)  # the body may have set a NaN / non-numeric reward

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a sync or async task function; coroutines run on the harness's event loop."""
        value = function(*args, **kwargs)
        if inspect.isawaitable(value):
            assert self.harness is not None

            async def _await() -> Any:
                return await value

            return self.harness.loop.run(_await())
        return value

    def on_report(self, nodeid: str, report: pytest.TestReport, call: pytest.CallInfo) -> None:
        if nodeid in self.train_items or nodeid in self.replayed:
            return
        pending = self.pending.get(nodeid)
        if pending is None:
            if report.failed:
                self.other_failures += 1
            return
        if pending.recorded or report.skipped or (report.passed and report.when != "call"):
            return
        pending.recorded = True
        episode, failure = _episode_or_failure(pending.future)
        if episode is None:
            self.infra_errors += 1
            verdict = Verdict(Status.INFRA_ERROR, failure[:ERROR_TEXT_LIMIT], None)
            pending.rollout = self._record(make_rollout(
                run_id=self.run_dir.name, case=pending.case, episode=None, handle=None,
                verdict=verdict, step=None))
            return
        handle = pending.handle or RolloutHandle(episode)
        drop_bad_rewards(handle)  # a failed body may have left a bad reward on the handle
        status, error = handle.status, handle.error
        if status is Status.INFRA_ERROR or self.training_error:
            self.infra_errors += 1
        if status is Status.COMPLETED and not report.passed:
            status, error = Status.TASK_FAILED, _error_text(call)
        success = report.passed if status in (Status.COMPLETED, Status.TASK_FAILED) else False
        if status is Status.INFRA_ERROR:
            success = None
        pending.rollout = self._record(make_rollout(
            run_id=self.run_dir.name, case=pending.case, episode=episode, handle=handle,
            verdict=Verdict(status, error, success), step=None,
        ))

    def recorded(self, nodeid: str) -> Rollout | None:
        """The rollout recorded for a pytest item so far (one kept from a resume included)."""
        if nodeid in self.replayed:
            return self.replayed[nodeid]
        pending = self.pending.get(nodeid)
        return pending.rollout if pending is not None else None

    def item_finished(self) -> None:
        """After pytest wrote an item's result: a progress line if one is due."""
        if self.pending:
            self._tick()

    def items_finished(self) -> None:
        """After the test loop (and pytest's [100%]): the items' final line, with success."""
        if self.pending or self.replayed:
            self._tick(force=True)

    # -- fixtures --------------------------------------------------------------------------

    def harness_gateway(self) -> Any:
        if self.harness is None:
            self.harness = Harness(self.config.typed, progress=self.write, private_dirs=(self.run_dir,))
        self.harness.start()
        return self.harness.gateway

    def extra_sessions(self, case: Case) -> "ExtraSessions":
        self.harness_gateway()
        assert self.harness is not None
        return ExtraSessions(self.harness, case)

    # -- the end ---------------------------------------------------------------------------

    def finish(self, exitstatus: int, *, write_reports: bool = True) -> int:
        self.progress.clear()
        for pending in self.pending.values():
            pending.future.cancel()
        try:
            if self.harness is not None:
                self.harness.close()
        finally:
            if self._store is not None:
                self._store.close()
        if self._store is not None and self._store.write_errors:
            errors = self._store.write_errors
            self.infra_errors += len(errors)
            self.write(f"agentcore-rl: {len(errors)} rollout(s) could not be "
                       f"written to {self.run_dir}: {errors[0]}")
        if not write_reports:
            return exitstatus
        self.report = build_report(
            run_id=self.run_dir.name,
            mode=self.mode,
            config=self.config.resolved,
            overrides=self.config.overrides,
            versions=self.harness.versions() if self.harness else {},
            git_sha=_git_sha(self.rootdir),
            started_at=self.started_at.isoformat(),
            wall_time_s=round(time.monotonic() - self.started_monotonic, 3),
            rollouts=self.rollouts,
            item_phase=self.phase,
            train_steps=self.train_steps,
            tags={name: list(spec.tags) for name, spec in self.specs.items()},
            discarded=read_discarded(self.run_dir),
        )
        self._check_gates()
        if self._store is not None:  # no rollout ran: the gates are judged, nothing is written
            write_report_files(self.run_dir, self.report, self.rollouts, self.config.typed.report)
        if self.save_baseline:
            self._write_baseline()
        if self.mode == "collect" and self.rollouts:
            self._save_dataset()
        if exitstatus == pytest.ExitCode.TESTS_FAILED and not (
            self.infra_errors or self.other_failures or self.gate_failures
        ):
            return pytest.ExitCode.OK
        if (self.gate_failures or self.infra_errors) and exitstatus == pytest.ExitCode.OK:
            return pytest.ExitCode.TESTS_FAILED
        return exitstatus

    def _check_gates(self) -> None:
        """CI gates: min success rate, and regressions against a baseline (paired, p < 0.05)."""
        assert self.report is not None
        gates = self.config.typed.gates
        try:
            baseline = load_report(self.compare_path) if self.compare_path else None
            failures = check_gates(
                self.report, min_success_rate=gates.min_success_rate, baseline=baseline,
                max_regression=gates.max_regression,
            )
        except HarnessError as exc:
            self.gate_failures = [f"gate configuration: {exc}"]
            return
        self.report.gates = failures
        self.gate_failures = [failure.message for failure in failures]

    def _write_baseline(self) -> None:
        """Keep this run's report.json as a named baseline for `--agentcore-rl-compare NAME`."""
        assert self.report is not None and self.save_baseline
        path = baseline_path(self.rootdir, self.save_baseline)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.report.model_dump_json(indent=2), encoding="utf-8")
        self.write(f"agentcore-rl: saved baseline {self.save_baseline!r} to {path}")

    def _save_dataset(self) -> None:
        kept = [r for r in self.rollouts if r.status is not Status.INFRA_ERROR]
        try:
            write_parquet(self.run_dir, kept)
        except Exception as exc:  # pyarrow / datasets: rollouts.jsonl still holds every rollout
            self.infra_errors += 1
            self.write(f"agentcore-rl collect: cannot write rollouts.parquet "
                       f"({type(exc).__name__}: {exc}); rollouts.jsonl has every rollout")

    def summary_lines(self) -> list[str]:
        if self.report is None:
            return []
        if self._store is None:
            lines = [f"agentcore-rl {self.mode}: no rollout ran, so no run directory was written"]
        else:
            lines = [f"agentcore-rl {self.mode}: {render.verdict(self.report.overall)}"]
            if self.report.delta is not None:
                lines.append(
                    f"agentcore-rl pre -> post: {render.delta_line(self.report.delta.overall)}")
            lines.append(f"agentcore-rl run directory: {self.run_dir}")
        if self.infra_errors:
            lines.append(f"agentcore-rl: {self.infra_errors} infrastructure error(s): exit 1")
        lines += [f"agentcore-rl gate FAILED: {failure}" for failure in self.gate_failures]
        return lines


def write_report_files(
    run_dir: Path, report: Report, rollouts: list[Rollout], settings: ReportConfig,
) -> None:
    """The report files `report.formats` names; report.md also to $GITHUB_STEP_SUMMARY if asked."""
    render.write_reports(
        run_dir, report, rollouts, formats=settings.formats, step_summary=settings.step_summary
    )


def _progress(settings: ReportConfig, terminal: Terminal | None) -> Progress:
    isatty = bool(terminal is not None and terminal.isatty)
    return Progress(
        terminal,
        style=choose_style(settings.progress, isatty=isatty, environ=os.environ),
        every_pct=settings.progress_every_pct,
        every_s=settings.progress_every_s,
    )


class ExtraSessions:
    """Open extra agent sessions by hand from a task test (e.g. a second opinion)."""

    def __init__(self, harness: Harness, case: Case) -> None:
        self._harness = harness
        self._case = case

    def run(self, row: dict[str, Any] | None = None) -> RolloutHandle:
        """Run the task's agent once more on `row` (default: this case's row)."""
        case = self._case if row is None else dataclasses.replace(
            self._case, row={"id": self._case.row_id, **row}
        )
        return RolloutHandle(self._harness.loop.run(self._harness.run_case(case)))


BASELINES_DIR = ".agentcore-rl/baselines"


def baseline_path(rootdir: Path, name: str) -> Path:
    """Where `--agentcore-rl-save-baseline NAME` keeps a report, and `--agentcore-rl-compare NAME`
    finds it (a run directory or a report.json path works too)."""
    return Path(rootdir) / BASELINES_DIR / f"{name}.json"


def resolve_baseline(rootdir: Path, value: str) -> Path:
    path = Path(value)
    if path.exists():
        return path
    named = baseline_path(rootdir, value)
    if named.is_file():
        return named
    raise HarnessError(
        f"--agentcore-rl-compare {value!r}: not a run directory, a report.json, nor a baseline "
        f"saved with --agentcore-rl-save-baseline (looked in {named.parent})"
    )


def _key(item: Case | Rollout) -> tuple[str, str, int]:
    if isinstance(item, Case):
        return (item.spec.name, item.row_id, item.sample_index)
    return (item.task, item.row_id, item.sample_index)


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
    if call.excinfo.errisinstance(pytest.fail.Exception):  # pytest.fail("why"): the why is enough
        return call.excinfo.exconly()[:ERROR_TEXT_LIMIT]
    return failure_text(call.excinfo.value, summary=call.excinfo.exconly())


def _git_sha(rootdir: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=rootdir, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None
