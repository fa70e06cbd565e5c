"""Asynchronous training (`trainer.mode=async`): no step waits for the slowest episode of a batch.

Groups (one train row x `group_size` samples) are started continuously, up to
`runtime.concurrency` rollouts at once and paced by the staleness bound (`staleness.py`). Each
rollout is scored and recorded as it ends; a group is ready when all its samples are. An update
starts as soon as `batch_rows` groups are ready (the oldest-launched first) and runs while
rollouts go on (under `algo.stragglers=partial` a group with enough finished samples fills a
batch that would otherwise wait for stragglers; its unfinished samples are stopped, never
trained): the sampler takes the new weights between turns, and each turn records the version
that sampled it, so the loss's per-token importance ratios use the right logprobs.

A train rollout's `step` is its group's launch number (from 1, as steps are; its group id ends in
it), not the step that trained it: each step line names the groups it trained (`groups_trained`), which a
resumed run reads to train every rollout at most once. The sync loop is `training.py`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import operator
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..progress import POLL_S
from ..recipe.exploration import Adaptation
from ..records import Rollout
from ..tasks import TaskSpec
from ..train_store import append_step, latest_checkpoint
from ..trainers.base import StepMetrics, Trainer, TrainGroup
from ..trainers.grpo import EXCLUDED_STATUSES as EXCLUDED
from ..trainers.grpo import build_batch, training_reward
from .cases import Case, Episode
from .learning_signal import idle_warning, step_signal
from .staleness import blocking_straggler, may_start, partial_ready, split_stale
from .step_lines import budget_stop_line, stopped_in_update, update_start_line
from .training import RowSchedule, TrainPlan, build_groups, checkpoint_name

Update = Callable[[list[TrainGroup]], "concurrent.futures.Future[StepMetrics]"]


@dataclass
class _Group:
    launch: int
    cases: list[Case]
    futures: list[concurrent.futures.Future[Episode]]
    version: int  # the policy version the sampler served when the group started
    started: float
    rollouts: dict[int, Rollout] = field(default_factory=dict)  # scored, by sample
    ended: dict[int, float] = field(default_factory=dict)  # when each sample's rollout ended (monotonic)

    @property
    def complete(self) -> bool:
        return len(self.rollouts) == len(self.cases)

    @property
    def usable(self) -> int:
        """Finished samples the trainer can take (not timeout, agent_error, ...)."""
        return sum(1 for rollout in self.rollouts.values() if rollout.status not in EXCLUDED)


@dataclass
class _Counters:
    """What happened since the last step line."""

    paced: int = 0  # group starts that waited for the staleness bound
    straggler_wait_s: float = 0.0  # a ready batch waited for a straggler (stragglers=wait)
    held: bool = False


class AsyncTrainingLoop:
    def __init__(
        self,
        *,
        plan: TrainPlan,
        specs: Sequence[TaskSpec],
        submit: Callable[[Case], concurrent.futures.Future[Episode]],
        score: Callable[[Case, Episode], Rollout],
        trainer: Trainer,
        run_dir: Path,
        write: Callable[[str], None],
        concurrency: int,
        start_step: int = 0,
        first_launch: int = 1,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        tick: Callable[[], None] = lambda: None,
        adapt: Callable[[dict[str, Any], list[Rollout]], Adaptation] | None = None,
    ) -> None:
        """`submit` starts one rollout; `first_launch` is the next group number (a resumed run's
        `staleness.next_launch`; groups are numbered from 1); `start_step` is the steps done (step
        lines number steps from 1); `tick` keeps the progress display going while it waits;
        `adapt` adds to a step's line before it is written and may end training after the step
        (the time budget, `recipe.py`'s StepAdapter)."""
        self.plan, self.specs, self.submit, self.score, self.trainer = plan, specs, submit, score, trainer
        self.train_dir, self.checkpoint_dir = run_dir / "train", run_dir / "checkpoints"
        self.write, self.on_step, self.tick, self.adapt = write, on_step, tick, adapt
        self.concurrency = max(concurrency, 1)
        self.step = start_step  # steps done: the next step line is step + 1
        self.launch = first_launch
        self.schedule = RowSchedule(specs, plan.seed)
        for _ in range(first_launch - 1):
            self.schedule.take(1)
        self.live: dict[int, _Group] = {}  # started, not yet complete
        self.ready: deque[_Group] = deque()  # complete, not yet trained
        self.cut: list[tuple[Case, concurrent.futures.Future[Episode]]] = []  # stragglers stopped, not yet ended
        self.counters = _Counters()
        self.idle_streak = 0

    def run(self, update: Update) -> list[dict[str, Any]]:
        """Train the remaining steps; `update(groups)` starts one trainer step and returns its future."""
        self.train_dir.mkdir(parents=True, exist_ok=True)
        lines: list[dict[str, Any]] = []
        running: tuple[concurrent.futures.Future[StepMetrics], list[_Group], dict[str, Any]] | None = None
        since = self.started = time.monotonic()
        try:
            while self.step < self.plan.steps:
                # during an update the trainer's number moves before the sampler has the weights:
                # new groups start under the version the update began at
                serving = running[2]["version"] if running else self.trainer.policy_version
                self._start_groups(serving, training=len(running[1]) if running else 0)
                self._collect()
                if running is None:
                    batch = self._next_batch()
                    if batch is not None:
                        running = self._begin(batch, update)
                        continue
                elif running[0].done():
                    future, groups, pending = running
                    running = None
                    lines.append(self._finish(future.result(), groups, pending, since))
                    since = time.monotonic()
                    continue
                self._wait(running[0] if running else None)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM: say what becomes of an update in flight, then stop
            if running is not None:
                self.write(stopped_in_update(step=self.step + 1, steps=self.plan.steps,
                                             rollouts=len(running[2]["rollouts"]),
                                             checkpoint=latest_checkpoint(self.train_dir.parent)))
            raise
        finally:
            self._abandon(running)
        return lines

    # -- starting and collecting -----------------------------------------------------------

    def _start_groups(self, version: int, *, training: int) -> None:
        group_size = self.plan.group_of(self.specs)
        while True:
            in_flight = len(self._running())
            needed = (self.plan.steps - self.step) * self.plan.batch_rows - training
            outstanding = len(self.live) + len(self.ready)
            if (in_flight and in_flight + group_size > self.concurrency) or outstanding >= needed:
                return
            if not may_start(outstanding_groups=outstanding + training, batch_rows=self.plan.batch_rows,
                             max_staleness=self.plan.max_staleness):
                self.counters.held = True
                return
            self._start_one(version)

    def _start_one(self, version: int) -> None:
        (spec, row), = self.schedule.take(1)
        size = self.plan.group_size or spec.samples
        cases = [Case(spec=spec, row=row, sample_index=index, phase="train", step=self.launch)
                 for index in range(size)]
        group = _Group(self.launch, cases, [self.submit(case) for case in cases], version, time.monotonic())
        for index, future in enumerate(group.futures):  # the step line's `async.times_s.batch_ready`
            future.add_done_callback(lambda _, index=index: group.ended.setdefault(index, time.monotonic()))
        self.live[self.launch] = group
        self.launch += 1
        if self.counters.held:
            self.counters.paced += 1
            self.counters.held = False

    def _running(self) -> list[concurrent.futures.Future[Episode]]:
        """Rollouts not ended yet, stopped stragglers included (they hold a session until they end)."""
        return ([f for g in self.live.values() for f in g.futures if not f.done()]
                + [f for _, f in self.cut if not f.done()])

    def _collect(self) -> None:
        """Score each rollout that ended (its record is written now); complete groups are ready. A
        stopped straggler that ended anyway is scored and recorded too, never trained."""
        for case, future in [pair for pair in self.cut if pair[1].done()]:
            self.cut.remove((case, future))
            if not future.cancelled():
                self.score(case, future.result())
        for launch, group in list(self.live.items()):
            for index, future in enumerate(group.futures):
                if index not in group.rollouts and future.done():
                    group.rollouts[index] = self.score(group.cases[index], future.result())
            if group.complete:
                del self.live[launch]
                self.ready.append(group)

    # -- steps -----------------------------------------------------------------------------

    def _next_batch(self) -> list[_Group] | None:
        """The `batch_rows` ready groups launched first, unless the straggler policy says wait.
        Under `wait` only a live group holds an update back (it will finish); a ready group the
        update would leave more than K behind joins it instead (waiting cannot make it fresher).
        Under `partial` a live group with enough finished samples counts as ready, after the
        complete ones: it fills the batch, or joins it rather than be left too far behind."""
        by_launch = operator.attrgetter("launch")
        ready = sorted(self.ready, key=by_launch)
        if self.plan.stragglers == "partial":
            fraction = self.plan.min_group_fraction
            ready += sorted((g for g in self.live.values()
                             if partial_ready(finished=g.usable, size=len(g.cases), min_fraction=fraction)),
                            key=by_launch)
        if len(ready) < self.plan.batch_rows:
            return None
        batch = ready[: self.plan.batch_rows]
        if self.plan.stragglers == "drop":
            return batch
        version, bound = self.trainer.policy_version, self.plan.max_staleness
        batch += [g for g in ready[self.plan.batch_rows:]
                  if blocking_straggler([g.version], version=version, max_staleness=bound) is not None]
        taken = {g.launch for g in batch}
        if blocking_straggler([g.version for g in self.live.values() if g.launch not in taken], version=version,
                              max_staleness=bound) is not None:
            return None
        return batch

    def _begin(self, batch: list[_Group], update: Update):
        cut: list[Case] = []
        for group in batch:
            if group.complete:
                self.ready.remove(group)
            else:
                cut += self._cut(group)
        version = self.trainer.policy_version
        rollouts = [group.rollouts[i] for group in batch for i in sorted(group.rollouts)]
        kept, dropped, histogram = split_stale(rollouts, version=version, max_staleness=self.plan.max_staleness)
        groups, excluded = build_groups(kept)
        _, stats = build_batch(groups, normalize_std=False)  # what the update will train on
        self.write(update_start_line(step=self.step + 1, steps=self.plan.steps, groups_used=stats.groups_used,
                                     groups_total=stats.groups_total, tokens=stats.trained_tokens))
        pending = {"rollouts": rollouts, "dropped": dropped, "histogram": histogram, "excluded": excluded,
                   "cut": cut, "partial": sum(1 for g in batch if not g.complete),
                   "version": version, "in_flight": len(self._running()),
                   "trained_at": time.monotonic(), "oldest_start": min(g.started for g in batch),
                   # a rollout a resumed run restored has no end time here (nor one whose done
                   # callback has not run yet): the batch was ready when the rest ended
                   "batch_ready": max((g.ended[i] for g in batch for i in g.rollouts if i in g.ended), default=None)}
        future = update(groups)
        future.add_done_callback(lambda _: pending.setdefault("update_end", time.monotonic()))
        return future, batch, pending

    def _cut(self, group: _Group) -> list[Case]:
        """`group` trains without its unfinished samples: stop them (one that cannot be stopped
        any more is recorded when it ends, never trained); returns their cases."""
        del self.live[group.launch]
        cut = []
        for index, future in enumerate(group.futures):
            if index not in group.rollouts:
                cut.append(group.cases[index])
                if not future.cancel():
                    self.cut.append((group.cases[index], future))
        return cut

    def _finish(self, metrics: StepMetrics, batch: list[_Group], pending: dict[str, Any],
                since: float) -> dict[str, Any]:
        now = time.monotonic()
        rollouts = pending["rollouts"]
        scored = [r for r in rollouts if r.status not in EXCLUDED]
        rewards = [training_reward(r) for r in scored]
        successes = [bool(r.success) for r in scored]
        step = self.step + 1  # numbered from 1, as the terminal and checkpoints are
        due = step % self.plan.checkpoint_every == 0 or step == self.plan.steps
        checkpoint = checkpoint_name(step) if due else None
        line = {
            "step": step,
            "rollouts": len(rollouts),
            "excluded": pending["excluded"],
            "groups": len(batch),
            "reward_mean": statistics.fmean(rewards) if rewards else None,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else None,
            "success_rate": statistics.fmean(successes) if successes else None,
            **step_signal(rollouts),
            **metrics.to_json(),
            "wall_time_s": {"rollout": round(pending["trained_at"] - pending["oldest_start"], 3),
                            "train": round(now - pending["trained_at"], 3), "total": round(now - since, 3)},
            "async": {
                "version_trained": pending["version"],
                "dropped_stale": len(pending["dropped"]),
                "cut_stragglers": len(pending["cut"]),
                "partial_groups": pending["partial"],
                "paced_starts": self.counters.paced,
                "staleness": pending["histogram"],
                "in_flight": pending["in_flight"],
                "straggler_wait_s": round(self.counters.straggler_wait_s, 3),
                "launch_versions": sorted({g.version for g in batch}),
                "times_s": {name: None if pending.get(at) is None else round(pending[at] - self.started, 3)
                            for name, at in (("batch_ready", "batch_ready"), ("update_start", "trained_at"),
                                             ("update_end", "update_end"))} | {"step_line": round(now - self.started, 3)},
            },
            "groups_trained": [group.cases[0].group_id for group in batch],
            "rollouts_dropped": [f"{r.group_id}/{r.sample_index}" for r in pending["dropped"]],
            "rollouts_cut": [f"{case.group_id}/{case.sample_index}" for case in pending["cut"]],
        }
        line["step"] = step
        line["checkpoint"] = checkpoint
        stop = self._adapt(line, rollouts)
        append_step(self.train_dir.parent, line)  # before the checkpoint: resume trusts lines <= it
        checkpoint = line["checkpoint"]
        if checkpoint is not None:
            self.trainer.save_checkpoint(self.checkpoint_dir / checkpoint)
        if self.on_step is not None:
            self.on_step(line)
        self.counters = _Counters(held=self.counters.held)
        self._say(line)
        self.step += 1
        if stop:  # as if this step were the last: what is in flight is stopped as at the end
            self.write(budget_stop_line(step=step, steps=self.plan.steps, checkpoint=checkpoint))
            self.plan = dataclasses.replace(self.plan, steps=step)
        return line

    def _adapt(self, line: dict[str, Any], rollouts: list[Rollout]) -> bool:
        """The adapter's fields into the line; True (the step checkpointed) when training stops."""
        if self.adapt is None:
            return False
        adaptation = self.adapt(line, rollouts)
        line.update(adaptation.fields)
        if adaptation.group_size is not None:
            self.plan = dataclasses.replace(self.plan, group_size=adaptation.group_size)
        if adaptation.stop:
            line["checkpoint"] = checkpoint_name(line["step"])
        return adaptation.stop

    def _say(self, line: dict[str, Any]) -> None:
        extra = line["async"]
        dropped = f", {extra['dropped_stale']} dropped as stale" if extra["dropped_stale"] else ""
        if extra["cut_stragglers"]:
            dropped += (f", {extra['cut_stragglers']} stragglers cut from {extra['partial_groups']} partial "
                        f"group{'s' if extra['partial_groups'] != 1 else ''}")
        self.write(
            f"agentcore-rl train step {line['step']}/{self.plan.steps} done (async"
            f"{', saved ' + line['checkpoint'] if line['checkpoint'] else ''}): reward "
            f"{_fmt(line['reward_mean'])}, loss {_fmt(line.get('loss'))}, staleness {extra['staleness']}"
            f"{dropped}, {extra['paced_starts']} starts paced, {extra['in_flight']} rollouts in flight, "
            f"{line['trained_tokens']} tokens trained, {line['wall_time_s']['total']}s")
        self.idle_streak = self.idle_streak + 1 if not line["trained_tokens"] else 0
        if self.idle_streak:
            self.write(idle_warning(line, streak=self.idle_streak, total_steps=self.plan.steps))

    # -- waiting and the end ---------------------------------------------------------------

    def _wait(self, update: concurrent.futures.Future[StepMetrics] | None) -> None:
        futures = self._running()
        if update is not None:
            futures.append(update)
        started = time.monotonic()
        if futures:
            concurrent.futures.wait(futures, timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED)
        elif not self.ready:
            raise RuntimeError("async training has nothing in flight and nothing ready: no group could start "
                               f"(runtime.concurrency={self.concurrency} is below a group's samples?)")
        elif update is None:  # nothing can change any more: say so instead of spinning
            raise RuntimeError(f"async training is stuck at step {self.step + 1}: nothing in flight, "
                               f"{len(self.ready)} groups ready and no update could start "
                               f"(batch_rows={self.plan.batch_rows}, max_staleness={self.plan.max_staleness}); "
                               "this is a harness bug: report it with the run directory, and resume "
                               "(--agentcore-rl-resume) with algo.stragglers=drop, which never waits")
        if update is None and len(self.ready) >= self.plan.batch_rows:
            self.counters.straggler_wait_s += time.monotonic() - started
        self.tick()

    def _abandon(self, running) -> None:
        """The loop ended (done or failed): rollouts still in flight are cancelled, not trained."""
        left = self._running()
        for future in left:
            future.cancel()
        if running is not None:
            running[0].cancel()
        if left and self.step >= self.plan.steps:
            self.write(f"agentcore-rl async: training done; {len(left)} rollouts still in flight were "
                       "stopped (never trained)")


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"

