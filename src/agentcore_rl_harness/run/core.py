"""One run under `--agentcore-rl`, free of pytest: plan, roll out, score, train, finish.

`Run` ties the run core's jobs together and knows items only by id (pytest's node id):
`rundir` (config, directory, resume), `plan` (which cases), `schedule` (rollouts in flight),
`scoring` (one scorer for items, pre-eval and training), `train_loops` (the steps), `finish`
(reports, gates, baseline, whether the run failed). Its parts come from `compose.Harness`,
built from the config unless `harness=` is given (a test passes one over the shipped fakes).
`pytest_outcomes` maps pytest's outcomes to it and its results back to pytest. It is made from
frozen `RunOptions` and moves through `RunState`s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import ComposedConfig
from ..trainers.section import dropped_keys_message
from ..errors import HarnessError
from ..progress import Progress, Terminal
from ..recipe.choices import RecipeLog
from ..records import Rollout, Status
from ..reports.build import build_report
from ..judges.usage import role_usage
from ..reports.load import read_discarded
from ..train_store import read_steps
from ..reports.model import ITEM_PHASE, Report
from ..tasks import TaskSpec
from . import finish, recipe, states
from .budget import RunBudget, held_to_stop, idle_budget
from .cases import Case, Episode
from .compose import Harness
from .inflight import in_flight
from .lifecycle import RunState
from .options import RunOptions
from .plan import PlannedItem, TrainItem, case_key, plan_cases
from .rundir import RunDir
from .schedule import RunningBatch, Scheduler, episode_or_failure
from .scoring import RolloutHandle, Scorer, TaskErrors, item_verdict
from .tracking import Tracking, pre_eval_metrics
from .warmup import WarmUpRun
from .train_loops import StepSources, train_steps


@dataclass
class Run:
    """Public fields are set once, when made; the rest is private, changed by its own methods only."""

    options: RunOptions
    rundir: RunDir
    progress: Progress
    _harness: Harness | None = None  # built on first use, unless given
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    started_monotonic: float = field(default_factory=time.monotonic)
    _state: RunState = RunState.CONFIGURED
    _specs: dict[str, TaskSpec] = field(default_factory=dict)
    _task_tags: dict[str, list[str]] = field(default_factory=dict)  # of tasks other processes planned
    _train_items: set[str] = field(default_factory=set)
    _rollouts: list[Rollout] = field(default_factory=list)
    _train_steps: list[dict[str, Any]] = field(default_factory=list)
    _train_steps_total: int | None = None
    _training_error: str | None = None
    _infra_errors: int = 0
    _other_failures: int = 0
    _gate_failures: list[str] = field(default_factory=list)
    _task_errors: TaskErrors = field(default_factory=TaskErrors)  # each task's bug printed once
    _report: Report | None = None
    _tracking: Tracking | None = None  # logger=...: opened with the run directory
    _recipe: RecipeLog | None = None  # recipe=auto's choices, made before the harness is built
    _scheduler: Scheduler | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name in self.__dict__:
            raise AttributeError(f"Run.{name} is set once, when the run is made; a run changes only "
                                 "through its own methods")
        super().__setattr__(name, value)

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
        run = cls(options=options, rundir=rundir, _harness=harness,
                  progress=rundir.config.typed.report.progress_display(terminal))
        for note in (dropped_keys_message(rundir.config.typed.trainer), idle_budget(rundir.config.typed, rundir.mode)):
            if note:  # a setting this run cannot use
                run.write(f"agentcore-rl config: {note}")
        return run

    # -- what the run is -------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.rundir.mode

    @property
    def state(self) -> RunState:
        return self._state

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
                self.rundir, self.parts()), live_sessions=lambda: self._harness.live_sessions() if self._harness else 0)
        return self._scheduler

    def parts(self) -> Harness:
        """The harness (sampler, gateway, runtime, trainer), built on first use; not started."""
        if self._harness is None:
            self._harness = Harness(self.config.typed, progress=self.write, private_dirs=(self.run_dir,))
        return self._harness

    def scorer(self) -> Scorer:
        harness = self.parts()
        return Scorer(run_id=self.run_dir.name, call=harness.call, fixtures=harness.offline_fixtures,
                      judging=lambda: harness.judging(self.run_dir))  # answers, usage: RUN_DIR/judge

    def plan(self, spec: TaskSpec) -> list[PlannedItem]:
        """The items of one task in this run's mode."""
        items = plan_cases(spec, mode=self.mode, config=self.config.typed)
        self._specs[spec.name] = spec
        return items

    # -- running ---------------------------------------------------------------------------

    def start(self, items: Sequence[tuple[str, PlannedItem]]) -> None:
        """Start the harness, open the run directory, train first (run / train modes), then
        submit every item's rollout at once."""
        if self._state is not RunState.CONFIGURED:
            raise HarnessError(f"the run cannot start: it is {self._state.value} already")
        if not items:
            return
        if recipe.chooses(self.config.typed, mode=self.mode, resumed=self.rundir.resumed is not None,
                          shared=self.rundir.shared):  # recipe=auto's start-up choices change the config first
            self._recipe, config = recipe.start_up(self.config, list(self._specs.values()), write=self.write,
                                                   harness_built=self._harness is not None)
            self.rundir.reconfigure(config)
        harness = self.parts()
        self.write(f"agentcore-rl {self.mode}: run directory {self.run_dir}")
        specs = list({id(item.spec): item.spec for _, item in items}.values())
        harness.started(specs, write=self.write)  # first: a missing dependency or model leaves no run directory behind
        self.rundir.open()
        start_step = self.reload() if self.rundir.resumed is not None else 0
        if self.config.typed.logger and not self.rundir.shared:  # under -n, not in workers
            self._tracking = Tracking.start(
                self.config.typed.logger, run_dir=self.run_dir, mode=self.mode, rootdir=self.options.rootdir,
                config=self.config.resolved, steps=self._train_steps, write=self.write)
        cases = [(item_id, item) for item_id, item in items if isinstance(item, Case)]
        if self.mode in ("run", "train"):
            self._state = RunState.TRAINING
            self._train_first(specs, [case for _, case in cases], start_step)
        self._state = RunState.ITEMS
        self._train_items.update(item_id for item_id, item in items if isinstance(item, TrainItem))
        scheduler = self.scheduler
        scheduler.schedule(cases, done={case_key(r): r for r in self._rollouts if r.phase == self.phase})
        if scheduler.replayed:
            self.write(f"agentcore-rl resume: {len(scheduler.replayed)} finished rollouts kept")
        if scheduler.pending:
            self.write(f"agentcore-rl {self.phase}: {len(scheduler.pending)} rollouts")
        scheduler.begin_items(self.phase)

    def reload(self) -> int:
        """Keep finished rollouts of a resumed run; return the training step to continue from."""
        reloaded = self.rundir.reload()
        self._rollouts = list(reloaded.rollouts)
        self._train_steps = list(reloaded.train_steps)
        if reloaded.checkpoint is not None and self.mode in ("run", "train"):
            self.parts().trainer().load_checkpoint(reloaded.checkpoint)
        self.write(reloaded.line())
        return reloaded.start_step

    def _train_first(self, specs: list[TaskSpec], cases: list[Case], start_step: int) -> None:
        """`run`: the pre-eval, then training; `train`: training. A failure is the run's
        (`training_error`, an infrastructure error), and its items report it."""
        harness, typed = self.parts(), self.config.typed
        budget = RunBudget.of(typed, self._recipe, run_dir=self.run_dir, started=self.started_monotonic, write=self.write)
        try:
            if self.mode == "run":
                plan = harness.train_plan()
                pre_left = len(cases) - sum(1 for r in self._rollouts if r.phase == "pre")
                self.progress.set_job((("pre", pre_left), ("train", plan.rollouts_left(specs, start_step)),
                                       ("post", len(cases))))
                with budget.evaluation() if budget is not None else contextlib.nullcontext():  # the post-eval's estimate
                    self._evaluate_as(cases, phase="pre", label="pre-eval")
                if self._tracking:
                    self._tracking.summary(pre_eval_metrics(self._rollouts, typed.seed), step=0)
            if start_step == 0:  # a checkpoint holds the warm-up already
                self._warm_up(specs, cases, budget)
            plan = held_to_stop(harness.train_plan(), self._train_steps, self.write)  # a resumed run's budget stop
            self._train_steps_total = plan.steps
            if start_step >= plan.steps:
                return
            trainer = harness.trainer()
            on_step = self._tracking.step if self._tracking else None
            adapt = recipe.StepAdapter(typed.recipe, self._recipe, run_dir=self.run_dir, trainer=trainer, budget=budget,
                                       group_size=plan.group_of(specs), steps=plan.steps, signal=plan.mode != "async")
            if budget is not None:
                budget.training_starts()
            if plan.mode == "async":
                self.progress.begin_phase("train", plan.rollouts_left(specs, start_step))
            sources = StepSources(start_batch=self.start_batch, start_one=self.scheduler.start_one,
                                  score=self.score_and_record, tick=lambda: self.scheduler.tick(waiting=True),
                                  run_dir=self.run_dir, write=self.write, concurrency=typed.runtime.concurrency,
                                  resumed=self.rundir.resumed or ())
            self._train_steps += train_steps(plan, specs, sources=sources, trainer=trainer, loop=harness.loop,
                                             start_step=start_step, adapt=adapt, on_step=on_step)
        except (HarnessError, ValueError, RuntimeError, OSError) as exc:
            self._training_error = f"{type(exc).__name__}: {exc}"
            self._infra_errors += 1
            self.write(f"agentcore-rl: training failed: {self._training_error}")

    def _warm_up(self, specs: list[TaskSpec], cases: list[Case], budget: RunBudget | None) -> None:
        """The warm-up (`warmup.py`; recipe=auto's: `recipe.py`); `run` mode then evaluates again (phase "warmup")."""
        run = WarmUpRun(config=self.config.typed, run_dir=self.run_dir, trainer=self.parts().trainer,
                        renderer=self.parts().renderer, roll_out=self.offline_phase, write=self.write)
        if recipe.warm_up(run, specs, self._recipe, budget) and self.mode == "run" and self.config.typed.warmup.eval:
            with budget.evaluation() if budget is not None else contextlib.nullcontext():  # the post-eval's estimate
                self._evaluate_as(cases, phase="warmup", label="eval after the warm-up")

    def _evaluate_as(self, cases: list[Case], *, phase: str, label: str) -> None:
        """Roll out and score the item cases as `phase`, but those a resumed run kept."""
        done = {case_key(r) for r in self._rollouts if r.phase == phase}
        todo = [case for case in (dataclasses.replace(case, phase=phase) for case in cases)
                if case_key(case) not in done]
        if todo:
            self.write(f"agentcore-rl {label}: {len(todo)} rollouts")
            self.offline_phase(todo)

    def offline_phase(self, cases: list[Case]) -> list[Rollout]:
        """Roll out and score a batch the harness scores itself (pre-eval, warm-up demonstrations, probes)."""
        batch = self.start_batch(cases)
        rollouts = batch.scored(lambda index, episode: self.score_and_record(cases[index], episode))
        self.scheduler.tick(force=True)  # the phase's line with its success rate
        return rollouts

    def start_batch(self, cases: list[Case]) -> RunningBatch:
        return self.scheduler.start_batch(cases, steps=self._train_steps_total)

    def score_and_record(self, case: Case, episode: Episode) -> Rollout:
        try:
            rollout = self.scorer().score(case, episode)
        finally:
            self._release(episode)
        return self._record(rollout)

    def _release(self, episode: Episode) -> None:
        """Scored: the session's final files are saved for `rescore` (`states.py`), then what the
        episode held (its sandbox) can go."""
        if episode.sandbox is not None and self.config.typed.runtime.keep_final_state and self.rundir.opened:
            final = episode.sandbox.backend  # an arl.Sandbox over the episode's FinalSandbox
            states.save(self.run_dir, episode.session_id, final.state, final.why_missing)
        if episode.held:
            self.parts().loop.run(episode.held.release())

    def record_received(self, rollout: Rollout) -> Rollout:
        """Record a rollout another process of the run scored (`pytest -n`): this one writes."""
        return self._record(rollout)

    def _record(self, rollout: Rollout) -> Rollout:
        rollout = self.rundir.store.append(rollout)  # as written: an unstorable value fails the rollout
        self._rollouts.append(rollout)
        self.progress.rollout_scored(rollout.success)
        if rollout.status is Status.TASK_ERROR and not self._task_errors.shown(rollout.task):
            self.write(self._task_errors.text(rollout.task, rollout.error or ""))
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

        if item_id in self._train_items:
            if self._training_error:
                raise HarnessError(f"training failed: {self._training_error}")
            return
        if self._training_error:
            raise HarnessError(f"training failed, post-eval is meaningless: {self._training_error}")
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
            raise TaskCodeError(self._task_errors.text(case.spec.name, str(exc))) from None

    def record_item(self, item_id: str, *, passed: bool, error: str | None = None) -> None:
        """Record an item's rollout with pytest's verdict (once; replayed and train items are
        recorded already). A failed item that is not a task's fails the run."""
        if item_id in self._train_items or item_id in self.scheduler.replayed:
            return
        pending = self.scheduler.pending.get(item_id)
        if pending is None:
            if not passed:
                self._other_failures += 1
            return
        if pending.recorded:
            return
        pending.recorded = True
        scorer = self.scorer()
        episode, failure = episode_or_failure(pending.future)
        if episode is None:
            self._infra_errors += 1
            pending.rollout = self._record(scorer.infra_rollout(pending.case, failure))
            return
        handle = pending.handle or RolloutHandle(episode)
        verdict = item_verdict(handle, passed=passed, error=error)
        if verdict.status is Status.INFRA_ERROR or self._training_error:
            self._infra_errors += 1
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
        if self._state is RunState.ITEMS and self.scheduler.pending:
            self.scheduler.tick()

    def items_finished(self) -> None:
        """After the test loop: the items' final line, with success."""
        if self._state is RunState.ITEMS and (self.scheduler.pending or self.scheduler.replayed):
            self.scheduler.tick(force=True)

    def worker_counts(self) -> dict[str, Any]:
        """What a `pytest -n` worker sends its controller when it stops (`add_worker_counts`)."""
        return {"infra_errors": self._infra_errors, "other_failures": self._other_failures,
                "tags": {name: list(spec.tags) for name, spec in self._specs.items()}}

    def add_worker_counts(self, *, infra_errors: int, other_failures: int, tags: dict[str, list[str]]) -> None:
        """A `pytest -n` worker's counts and its tasks' tags, sent when it stopped (sharding.py)."""
        self._infra_errors += infra_errors
        self._other_failures += other_failures
        self._task_tags.update(tags)

    def worker_lost(self, why: str) -> None:
        """A worker stopped before its share finished: an infrastructure error of the run."""
        self._infra_errors += 1
        self.write(why)

    def order_rollouts(self, position: Callable[[Rollout], int]) -> None:
        """Put the rollouts in collection order (stable), as one process would have them."""
        self._rollouts.sort(key=position)

    # -- the end ---------------------------------------------------------------------------

    def finish(self, *, write_reports: bool = True, interrupted: bool = False) -> bool:
        """Stop what runs, write the reports, judge the gates; True if the run failed.
        `interrupted`: the session was stopped; the report says so and how to resume."""
        if self._state.ended:
            raise HarnessError(f"the run cannot finish: it is {self._state.value} already")
        self._state = RunState.INTERRUPTED if interrupted and self.rundir.opened else RunState.FINISHED
        if self._state is RunState.INTERRUPTED and not self.rundir.shared:  # the steps a stopped loop never returned
            self._train_steps = read_steps(self.run_dir)
        self.progress.clear()
        if self._scheduler is not None:
            self._scheduler.cancel()
        try:
            if self._harness is not None:
                self._harness.close()
        finally:
            write_errors = self.rundir.close()
        if write_errors:
            self._infra_errors += len(write_errors)
            self.write(f"agentcore-rl: {len(write_errors)} rollout(s) could not be "
                       f"written to {self.run_dir}: {write_errors[0]}")
        if write_reports and not self.rundir.shared:  # a worker's controller reports
            self._write_report()
        failed = finish.run_failed(infra_errors=self._infra_errors, other_failures=self._other_failures,
                                   gate_failures=self._gate_failures)
        if self._tracking:
            self._tracking.end(report=self._report, train_steps=self._train_steps, run_dir=self.run_dir,
                              failed=failed)
        return failed

    def _write_report(self) -> None:
        self._report = build_report(
            run_id=self.run_dir.name, mode=self.mode, config=self.config.resolved,
            overrides=self.config.overrides,
            versions=finish.versions() if self._harness or self._rollouts else {},
            git_sha=finish.git_sha(self.options.rootdir), started_at=self.started_at.isoformat(),
            wall_time_s=round(time.monotonic() - self.started_monotonic, 3), rollouts=self._rollouts,
            item_phase=self.phase, train_steps=self._train_steps,
            tags={**self._task_tags, **{name: list(spec.tags) for name, spec in self._specs.items()}},
            discarded=read_discarded(self.run_dir), roles=role_usage(self.run_dir, self._rollouts, self.config.resolved),
            recipe=recipe.recipe_of(self._recipe, self.run_dir, save=self.rundir.opened and not self.rundir.shared))
        if self._state is RunState.INTERRUPTED:
            self._report.interrupted = finish.interrupted(self.run_dir, self._rollouts, len(self._train_steps),
                                                         self.options.resume_command(self.run_dir))
        self._gate_failures = finish.judge_gates(self._report, self.config.typed.gates, self.options.compare)
        if self.rundir.opened:  # no rollout ran: the gates are judged, nothing is written
            finish.write_report_files(self.run_dir, self._report, self._rollouts, self.config.typed.report)
        if self.options.save_baseline:
            path = finish.write_baseline(self.options.rootdir, self.options.save_baseline, self._report)
            self.write(f"agentcore-rl: saved baseline {self.options.save_baseline!r} to {path}")
        if self.mode == "collect" and self._rollouts and not finish.save_dataset(self.run_dir, self._rollouts, self.write):
            self._infra_errors += 1

    def summary_lines(self) -> list[str]:
        return finish.summary_lines(mode=self.mode, report=self._report,
                                    run_dir=self.run_dir if self.rundir.opened else None,
                                    infra_errors=self._infra_errors, gate_failures=self._gate_failures)

