"""One run under `--agentcore-rl`, free of pytest: plan, roll out, score, train, finish.

`Run` ties the run core's jobs together and knows items only by id (pytest's node id):
`rundir` (config, directory, resume), `plan` (which cases), `schedule` (rollouts in flight),
`scoring` (one scorer for items, pre-eval and training), `training` (the loop), `finish`
(reports, gates, baseline, whether the run failed). Its parts come from `compose.Harness`,
built from the config unless `harness=` is given (a test passes one over the shipped fakes).
`pytest_outcomes` maps pytest's outcomes to it and its results back to pytest. It is made from
frozen `RunOptions` and moves through `RunState`s; nothing outside writes its fields.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import ComposedConfig
from ..reports.config import ReportConfig
from ..trainers.section import dropped_keys_message
from ..errors import HarnessError
from ..progress import Progress, Terminal, choose_style
from ..records import Rollout, Status
from ..reports.build import build_report
from ..judges.usage import role_usage
from ..reports.load import read_discarded
from ..train_store import read_steps
from ..reports.model import ITEM_PHASE, Report
from ..tasks import TaskSpec
from . import finish
from .cases import Case, Episode
from .compose import Harness
from .inflight import in_flight
from .lifecycle import RunState
from .options import RunOptions
from .plan import PlannedItem, TrainItem, case_key, plan_cases
from .recipe import configure, recipe_of, step_adapter, warm_up as recipe_warm_up
from .rundir import RunDir
from .schedule import RunningBatch, Scheduler, episode_or_failure
from .scoring import RolloutHandle, Scorer, TaskErrors, item_verdict
from .tracking import Tracking, pre_eval_metrics
from .async_loop import train_async
from .training import TrainingLoop


@dataclass
class Run:
    options: RunOptions
    rundir: RunDir
    progress: Progress
    state: RunState = RunState.CONFIGURED
    harness: Harness | None = None  # built on first use, unless given
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    started_monotonic: float = field(default_factory=time.monotonic)
    specs: dict[str, TaskSpec] = field(default_factory=dict)
    task_tags: dict[str, list[str]] = field(default_factory=dict)  # of tasks other processes planned
    train_items: set[str] = field(default_factory=set)
    rollouts: list[Rollout] = field(default_factory=list)
    train_steps: list[dict[str, Any]] = field(default_factory=list)
    train_steps_total: int | None = None
    training_error: str | None = None
    infra_errors: int = 0
    other_failures: int = 0
    gate_failures: list[str] = field(default_factory=list)
    task_errors: TaskErrors = field(default_factory=TaskErrors)  # each task's bug printed once
    report: Report | None = None
    tracking: Tracking | None = None  # logger=...: opened with the run directory
    recipe: Any = None  # recipe=auto's choices (`recipe.RecipeLog`), made before the harness is built
    _scheduler: Scheduler | None = None

    @classmethod
    def made(cls, options: RunOptions, *, terminal: Terminal | None, harness: Harness | None = None) -> "Run":
        """The run the options ask for: a new one, or `options.resume`'s continued."""
        overrides = list(options.overrides)
        rundir = (RunDir.resume(mode=options.mode, run_dir=options.resume, overrides=overrides)
                  if options.resume is not None else
                  RunDir.create(mode=options.mode, overrides=overrides, config_path=options.config_path,
                                out_dir=options.out, rootdir=options.rootdir))
        return cls._made(rundir, options, terminal, harness)

    @classmethod
    def attach(cls, options: RunOptions, *, run_dir: Path, resolved: dict[str, Any], resumed: bool,
               terminal: Terminal | None) -> "Run":
        """A worker process's share of a run its controller owns (`pytest -n`, see sharding.py):
        it rolls out and scores its items; the controller writes every file."""
        rundir = RunDir.attach(mode=options.mode, run_dir=run_dir, resolved=resolved,
                               overrides=list(options.overrides), resumed=resumed)
        return cls._made(rundir, options, terminal, None)

    @classmethod
    def _made(cls, rundir: RunDir, options: RunOptions, terminal: Terminal | None, harness: Harness | None) -> "Run":
        run = cls(options=options, rundir=rundir, harness=harness,
                  progress=make_progress(rundir.config.typed.report, terminal))
        dropped = dropped_keys_message(rundir.config.typed.trainer)
        if dropped:
            run.write(f"agentcore-rl config: {dropped}")
        return run

    # -- what the run is -------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.rundir.mode

    @property
    def rootdir(self) -> Path:
        return self.options.rootdir

    @property
    def resume_command(self) -> str:
        """How to continue this run if it is stopped."""
        return self.options.resume_command(self.run_dir)

    @property
    def config(self) -> ComposedConfig:
        return self.rundir.config

    @property
    def run_dir(self) -> Path:
        return self.rundir.path

    @property
    def phase(self) -> str:
        return ITEM_PHASE[self.mode]

    @property
    def write(self) -> Callable[[str], None]:
        """Write one whole line (the progress status line is cleared first)."""
        return self.progress.message

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = Scheduler(submit=self.parts().submit, progress=self.progress, inflight=in_flight(
                self.rundir, self.parts()), live_sessions=lambda: self.harness.live_sessions() if self.harness else 0)
        return self._scheduler

    def parts(self) -> Harness:
        """The harness (sampler, gateway, runtime, trainer), built on first use; not started."""
        if self.harness is None:
            self.harness = Harness(self.config.typed, progress=self.write, private_dirs=(self.run_dir,))
        return self.harness

    def scorer(self) -> Scorer:
        harness = self.parts()
        return Scorer(run_id=self.run_dir.name, call=harness.call, fixtures=harness.offline_fixtures,
                      judging=lambda: harness.judging(self.run_dir))  # answers, usage: RUN_DIR/judge

    def plan(self, spec: TaskSpec) -> list[PlannedItem]:
        """The items of one task in this run's mode."""
        items = plan_cases(spec, mode=self.mode, config=self.config.typed)
        self.specs[spec.name] = spec
        return items

    # -- running ---------------------------------------------------------------------------

    def start(self, items: Sequence[tuple[str, PlannedItem]]) -> None:
        """Start the harness, open the run directory, train first (run / train modes), then
        submit every item's rollout at once."""
        if self.state is not RunState.CONFIGURED:
            raise HarnessError(f"the run cannot start: it is {self.state.value} already")
        if not items:
            return
        configure(self)  # recipe=auto's start-up choices (run/recipe.py) change the config first
        harness = self.parts()
        self.write(f"agentcore-rl {self.mode}: run directory {self.run_dir}")
        harness.start()  # first: a missing dependency or model leaves no run directory behind
        specs = list({id(item.spec): item.spec for _, item in items}.values())
        for note in harness.runtime_notes(specs):  # what the runtime cannot apply (environments on ACR)
            self.write(f"agentcore-rl: {note}")
        self.rundir.open()
        start_step = self.reload() if self.rundir.resumed is not None else 0
        if self.config.typed.logger and not self.rundir.shared:  # under -n, not in workers
            self.tracking = Tracking.start(
                self.config.typed.logger, run_dir=self.run_dir, mode=self.mode, rootdir=self.rootdir,
                config=self.config.resolved, steps=self.train_steps, write=self.write)
        cases = [(item_id, item) for item_id, item in items if isinstance(item, Case)]
        if self.mode in ("run", "train"):
            self.state = RunState.TRAINING
            self._train_first(specs, [case for _, case in cases], start_step)
        self.state = RunState.ITEMS
        self.train_items.update(item_id for item_id, item in items if isinstance(item, TrainItem))
        scheduler = self.scheduler
        scheduler.schedule(cases, done={case_key(r): r for r in self.rollouts if r.phase == self.phase})
        if scheduler.replayed:
            self.write(f"agentcore-rl resume: {len(scheduler.replayed)} finished rollouts kept")
        if scheduler.pending:
            self.write(f"agentcore-rl {self.phase}: {len(scheduler.pending)} rollouts")
        scheduler.begin_items(self.phase)

    def reload(self) -> int:
        """Keep finished rollouts of a resumed run; return the training step to continue from."""
        reloaded = self.rundir.reload()
        self.rollouts = list(reloaded.rollouts)
        self.train_steps = list(reloaded.train_steps)
        if reloaded.checkpoint is not None and self.mode in ("run", "train"):
            self.parts().trainer().load_checkpoint(reloaded.checkpoint)
        after = f" after checkpoint {reloaded.checkpoint.name}" if reloaded.checkpoint is not None else ""
        self.write(f"agentcore-rl resume: {len(reloaded.rollouts)} rollouts kept, training continues "
                   f"at step {reloaded.start_step + 1}{after}")
        return reloaded.start_step

    def _train_first(self, specs: list[TaskSpec], cases: list[Case], start_step: int) -> None:
        """`run`: the pre-eval, then training; `train`: training. A failure is the run's
        (`training_error`, an infrastructure error), and its items report it."""
        harness = self.parts()
        try:
            if self.mode == "run":
                plan = harness.train_plan()
                per_step = plan.batch_rows * (plan.group_size or max((spec.samples for spec in specs), default=1))
                pre_left = len(cases) - sum(1 for r in self.rollouts if r.phase == "pre")
                self.progress.set_job((("pre", pre_left), ("train", max(0, plan.steps - start_step) * per_step),
                                       ("post", len(cases))))
                self._evaluate_as(cases, phase="pre", label="pre-eval")
                if self.tracking:
                    self.tracking.summary(pre_eval_metrics(self.rollouts, self.config.typed.seed), step=0)
            if start_step == 0:  # a checkpoint holds the warm-up already
                self._warm_up(specs, cases)
            plan = harness.train_plan()
            self.train_steps_total = plan.steps
            if start_step >= plan.steps:
                return
            trainer = harness.trainer()
            if plan.mode == "async":  # async_loop.py: no step waits for its slowest rollout
                self.train_steps += train_async(self, plan=plan, specs=specs, trainer=trainer, start_step=start_step)
                return
            loop = TrainingLoop(plan=plan, specs=specs, start_cases=self.start_batch, score=self.score_and_record,
                                trainer=trainer, run_dir=self.run_dir, write=self.write, start_step=start_step,
                                on_step=self.tracking.step if self.tracking else None,
                                adapt=step_adapter(self, trainer, plan, specs))
            self.train_steps += loop.run(lambda groups: harness.loop.run(trainer.step(groups=groups)))
        except (HarnessError, ValueError, RuntimeError, OSError) as exc:
            self.training_error = f"{type(exc).__name__}: {exc}"
            self.infra_errors += 1
            self.write(f"agentcore-rl: training failed: {self.training_error}")

    def _warm_up(self, specs: list[TaskSpec], cases: list[Case]) -> None:
        """The warm-up (`warmup.py`; recipe=auto's: `recipe.py`); `run` mode then evaluates again (phase "warmup")."""
        if recipe_warm_up(self, specs) and self.mode == "run" and self.config.typed.warmup.eval:
            self._evaluate_as(cases, phase="warmup", label="eval after the warm-up")

    def _evaluate_as(self, cases: list[Case], *, phase: str, label: str) -> None:
        """Roll out and score the item cases as `phase`, but those a resumed run kept."""
        done = {case_key(r) for r in self.rollouts if r.phase == phase}
        todo = [case for case in (dataclasses.replace(case, phase=phase) for case in cases)
                if case_key(case) not in done]
        if todo:
            self.write(f"agentcore-rl {label}: {len(todo)} rollouts")
            self.offline_phase(todo)

    def offline_phase(self, cases: list[Case]) -> list[Rollout]:
        """Roll out and score a batch the harness scores itself (pre-eval)."""
        batch = self.start_batch(cases)
        rollouts = batch.scored(lambda index, episode: self.score_and_record(cases[index], episode))
        self.scheduler.tick(force=True)  # the phase's line with its success rate
        return rollouts

    def start_batch(self, cases: list[Case]) -> RunningBatch:
        return self.scheduler.start_batch(cases, steps=self.train_steps_total)

    def score_and_record(self, case: Case, episode: Episode) -> Rollout:
        try:
            rollout = self.scorer().score(case, episode)
        finally:
            self._release(episode)
        return self._record(rollout)

    def _release(self, episode: Episode) -> None:
        """Scored: the session's final files are saved for `rescore` (`states.py`), then what the
        episode held (its sandbox) can go."""
        sandbox = episode.sandbox
        if sandbox is not None and self.config.typed.runtime.keep_final_state and self.rundir.opened:
            from . import states

            final = sandbox.backend  # an arl.Sandbox over the episode's FinalSandbox
            states.save(self.run_dir, episode.session_id, final.state, final.why_missing)
        if episode.held:
            self.parts().loop.run(episode.held.release())

    def record_received(self, rollout: Rollout) -> Rollout:
        """Record a rollout another process of the run scored (`pytest -n`): this one writes."""
        return self._record(rollout)

    def _record(self, rollout: Rollout) -> Rollout:
        rollout = self.rundir.store.append(rollout)  # as written: an unstorable value fails the rollout
        self.rollouts.append(rollout)
        self.progress.rollout_scored(rollout.success)
        if rollout.status is Status.TASK_ERROR and not self.task_errors.shown(rollout.task):
            self.write(self.task_errors.text(rollout.task, rollout.error or ""))
        return rollout

    # -- items -----------------------------------------------------------------------------

    def rollout_for(self, item_id: str) -> RolloutHandle:
        """The item's rollout as its task sees it (waits for it)."""
        return self.scheduler.handle(item_id)

    def run_item(self, item_id: str, body: Callable[..., Any], arguments: dict[str, Any]) -> None:
        """Score an item: a train item passes when training did; a replayed one keeps its
        recorded verdict; else the agent's failure fails it, then rewards, then `body`.
        Raises `scoring.ItemFailed` (the item fails) or `HarnessError` (the harness failed)."""
        from .scoring import ItemFailed, TaskCodeError

        if item_id in self.train_items:
            if self.training_error:
                raise HarnessError(f"training failed: {self.training_error}")
            return
        if self.training_error:
            raise HarnessError(f"training failed, post-eval is meaningless: {self.training_error}")
        replayed = self.scheduler.replayed.get(item_id)
        if replayed is not None:  # finished before the resume: report its recorded verdict
            if not replayed.success:
                raise ItemFailed(f"{replayed.status.value} (recorded): {replayed.error}")
            return
        handle = self.rollout_for(item_id)
        case = self.scheduler.pending[item_id].case
        try:
            self.scorer().run_body(case, handle, body, arguments)
        except TaskCodeError as exc:  # the traceback once per task, then one line each
            raise TaskCodeError(self.task_errors.text(case.spec.name, str(exc))) from None

    def record_item(self, item_id: str, *, passed: bool, error: str | None = None) -> None:
        """Record an item's rollout with pytest's verdict (once; replayed and train items are
        recorded already). A failed item that is not a task's fails the run."""
        if item_id in self.train_items or item_id in self.scheduler.replayed:
            return
        pending = self.scheduler.pending.get(item_id)
        if pending is None:
            if not passed:
                self.other_failures += 1
            return
        if pending.recorded:
            return
        pending.recorded = True
        scorer = self.scorer()
        episode, failure = episode_or_failure(pending.future)
        if episode is None:
            self.infra_errors += 1
            pending.rollout = self._record(scorer.infra_rollout(pending.case, failure))
            return
        handle = pending.handle or RolloutHandle(episode)
        verdict = item_verdict(handle, passed=passed, error=error)
        if verdict.status is Status.INFRA_ERROR or self.training_error:
            self.infra_errors += 1
        try:
            pending.rollout = self._record(scorer.rollout(pending.case, episode, handle, verdict))
        finally:
            self._release(episode)

    def recorded(self, item_id: str) -> Rollout | None:
        """The rollout recorded for an item so far (one kept from a resume included)."""
        scheduler = self.scheduler
        if item_id in scheduler.replayed:
            return scheduler.replayed[item_id]
        pending = scheduler.pending.get(item_id)
        return pending.rollout if pending is not None else None

    def item_finished(self) -> None:
        """After an item's result was written: a progress line if one is due."""
        if self.state is RunState.ITEMS and self.scheduler.pending:
            self.scheduler.tick()

    def items_finished(self) -> None:
        """After the test loop: the items' final line, with success."""
        if self.state is RunState.ITEMS and (self.scheduler.pending or self.scheduler.replayed):
            self.scheduler.tick(force=True)

    def add_worker_counts(self, *, infra_errors: int, other_failures: int, tags: dict[str, list[str]]) -> None:
        """A `pytest -n` worker's counts and its tasks' tags, sent when it stopped (sharding.py)."""
        self.infra_errors += infra_errors
        self.other_failures += other_failures
        self.task_tags.update(tags)

    def worker_lost(self, why: str) -> None:
        """A worker stopped before its share finished: an infrastructure error of the run."""
        self.infra_errors += 1
        self.write(why)

    def order_rollouts(self, position: Callable[[Rollout], int]) -> None:
        """Put the rollouts in collection order (stable), as one process would have them."""
        self.rollouts.sort(key=position)

    def started_harness(self) -> Harness:
        harness = self.parts()
        harness.start()
        return harness

    # -- the end ---------------------------------------------------------------------------

    def finish(self, *, write_reports: bool = True, interrupted: bool = False) -> bool:
        """Stop what runs, write the reports, judge the gates; True if the run failed.
        `interrupted`: the session was stopped; the report says so and how to resume."""
        if self.state.ended:
            raise HarnessError(f"the run cannot finish: it is {self.state.value} already")
        self.state = RunState.INTERRUPTED if interrupted and self.rundir.opened else RunState.FINISHED
        if self.state is RunState.INTERRUPTED and not self.rundir.shared:  # the steps a stopped loop never returned
            self.train_steps = read_steps(self.run_dir)
        self.progress.clear()
        if self._scheduler is not None:
            self._scheduler.cancel()
        try:
            if self.harness is not None:
                self.harness.close()
        finally:
            write_errors = self.rundir.close()
        if write_errors:
            self.infra_errors += len(write_errors)
            self.write(f"agentcore-rl: {len(write_errors)} rollout(s) could not be "
                       f"written to {self.run_dir}: {write_errors[0]}")
        if write_reports and not self.rundir.shared:  # a worker's controller reports
            self._report()
        failed = finish.run_failed(infra_errors=self.infra_errors, other_failures=self.other_failures,
                                   gate_failures=self.gate_failures)
        if self.tracking:
            self.tracking.end(report=self.report, train_steps=self.train_steps, run_dir=self.run_dir,
                              failed=failed)
        return failed

    def _report(self) -> None:
        self.report = build_report(
            run_id=self.run_dir.name, mode=self.mode, config=self.config.resolved,
            overrides=self.config.overrides,
            versions=finish.versions() if self.harness or self.rollouts else {},
            git_sha=finish.git_sha(self.rootdir), started_at=self.started_at.isoformat(),
            wall_time_s=round(time.monotonic() - self.started_monotonic, 3), rollouts=self.rollouts,
            item_phase=self.phase, train_steps=self.train_steps,
            tags={**self.task_tags, **{name: list(spec.tags) for name, spec in self.specs.items()}},
            discarded=read_discarded(self.run_dir), roles=role_usage(self.run_dir, self.rollouts, self.config.resolved),
            recipe=recipe_of(self))
        if self.state is RunState.INTERRUPTED:
            self.report.interrupted = finish.interrupted(self.run_dir, self.rollouts, len(self.train_steps),
                                                         self.resume_command)
        self.gate_failures = finish.judge_gates(self.report, self.config.typed.gates, self.options.compare)
        if self.rundir.opened:  # no rollout ran: the gates are judged, nothing is written
            finish.write_report_files(self.run_dir, self.report, self.rollouts, self.config.typed.report)
        if self.options.save_baseline:
            path = finish.write_baseline(self.rootdir, self.options.save_baseline, self.report)
            self.write(f"agentcore-rl: saved baseline {self.options.save_baseline!r} to {path}")
        if self.mode == "collect" and self.rollouts and not finish.save_dataset(self.run_dir, self.rollouts, self.write):
            self.infra_errors += 1

    def summary_lines(self) -> list[str]:
        return finish.summary_lines(mode=self.mode, report=self.report,
                                    run_dir=self.run_dir if self.rundir.opened else None,
                                    infra_errors=self.infra_errors, gate_failures=self.gate_failures)


def make_progress(settings: ReportConfig, terminal: Terminal | None) -> Progress:
    isatty = bool(terminal is not None and terminal.isatty)
    return Progress(
        terminal,
        style=choose_style(settings.progress, isatty=isatty, environ=os.environ),
        every_pct=settings.progress_every_pct,
        every_s=settings.progress_every_s,
    )
