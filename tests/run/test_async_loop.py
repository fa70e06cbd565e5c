"""`run/async_loop.py`: steps train as groups complete, stragglers are bounded, starts are paced.

Rollouts are real threads that sleep (slow rows sleep longer) and record the trainer's version
when they start and end, as the gateway records each turn's version; the trainer records."""

import asyncio
import concurrent.futures
import json
import threading
import time

import pytest
from run_fakes import RecordingTrainer, make_spec, said_four

from agentcore_rl_harness.records import SessionOutcome, Status, Trace, Usage
from agentcore_rl_harness.run.async_loop import AsyncTrainingLoop
from agentcore_rl_harness.run.cases import Episode
from agentcore_rl_harness.run.loop import LoopThread
from agentcore_rl_harness.run.scoring import Scorer
from agentcore_rl_harness.run.staleness import partial_ready
from agentcore_rl_harness.run.training import TrainPlan
from agentcore_rl_harness.trainers.grpo import build_batch


class Rollouts:
    """`submit` for the loop: a thread per rollout sleeping `duration(case)` seconds."""

    def __init__(self, trainer, duration):
        self.trainer, self.duration = trainer, duration
        self.pool = concurrent.futures.ThreadPoolExecutor(64)
        self.lock = threading.Lock()
        self.live = self.most_live = 0
        self.started = []  # (group launch, trainer steps done) at each start

    def submit(self, case):
        with self.lock:
            self.started.append((case.step, len(self.trainer.steps)))
            self.live += 1
            self.most_live = max(self.most_live, self.live)
        return self.pool.submit(self._run, case)

    def _run(self, case):
        first = self.trainer.policy_version
        time.sleep(self.duration(case))
        return self._episode(case, first)

    def _episode(self, case, first):
        last = self.trainer.policy_version
        with self.lock:
            self.live -= 1
        trace = Trace(token_ids=(1, 2, 3, 4), prompt_length=1, loss_mask=(1, 0, 1), logprobs=(-0.5, None, -0.25),
                      finish_reason="stop", metadata={"policy_versions": sorted({first, last})})
        reply = "4" if case.sample_index % 2 else "5"
        return Episode(case=case, session_id=f"s{case.step}-{case.sample_index}", traces=(trace,), turns=2,
                       usage=Usage(), outcome=SessionOutcome(Status.COMPLETED, {"reply": reply}, None, 0.0))


class Sessions(Rollouts):
    """`submit` like the harness's: a coroutine on an event loop (cancelling its future stops it)."""

    def __init__(self, trainer, duration):
        super().__init__(trainer, duration)
        self.loop = LoopThread("test-sessions")
        self.cancelled = []  # (group launch, sample index) of each session stopped

    def submit(self, case):
        with self.lock:
            self.started.append((case.step, len(self.trainer.steps)))
        return self.loop.submit(self._session(case))

    async def _session(self, case):  # live from its start on the loop, as a runtime's session slot
        with self.lock:
            self.live += 1
            self.most_live = max(self.most_live, self.live)
        first = self.trainer.policy_version
        try:
            await asyncio.sleep(self.duration(case))
        except asyncio.CancelledError:
            with self.lock:
                self.live -= 1
                self.cancelled.append((case.step, case.sample_index))
            raise
        return self._episode(case, first)


def _run(tmp_path, *, duration, steps=4, batch_rows=2, max_staleness=1, stragglers="wait", concurrency=8,
         update_s=0.05, train_rows=6, samples=2, min_group_fraction=0.5, sessions=Rollouts, scored=None,
         adapt=None, on_update=lambda: None):
    spec = make_spec(tmp_path, samples=samples, rewards=[said_four], train=train_rows, test=0)
    trainer = RecordingTrainer()
    rollouts = sessions(trainer, duration)
    scorer = Scorer(run_id="run", call=lambda f, *a, **k: f(*a, **k), fixtures=dict)

    def score(case, episode):
        if scored is not None:
            scored.append((case.step, case.sample_index))
        return scorer.score(case, episode)

    plan = TrainPlan(steps=steps, batch_rows=batch_rows, group_size=None, checkpoint_every=2, seed=1,
                     mode="async", max_staleness=max_staleness, stragglers=stragglers,
                     min_group_fraction=min_group_fraction)
    said = []
    loop = AsyncTrainingLoop(plan=plan, specs=[spec], submit=rollouts.submit, score=score, trainer=trainer,
                             run_dir=tmp_path / "run", write=said.append, concurrency=concurrency,
                             adapt=adapt(trainer) if adapt else None)
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def update(groups):
        def body():
            time.sleep(update_s)
            on_update()
            return asyncio.run(trainer.step(groups=groups))

        return pool.submit(body)

    lines = loop.run(update)
    return lines, trainer, rollouts, said


def _slow_row(row_id, seconds):
    return lambda case: seconds if case.row_id == row_id and case.step == 1 else 0.01


def test_steps_do_not_wait_for_a_straggler_and_each_group_is_trained_once_and_whole(tmp_path):
    # group 1 (the first launched) takes 1.5 s; every other group 10 ms: steps go on without it
    lines, trainer, rollouts, said = _run(tmp_path, duration=lambda c: 1.5 if c.step == 1 else 0.01,
                                          max_staleness=4, stragglers="drop", steps=3)
    trained = [g for line in lines for g in line["groups_trained"]]
    assert len(trained) == len(set(trained)) == 6  # batch_rows x steps, none twice
    assert all(not g.endswith("/1") for g in lines[0]["groups_trained"])  # the straggler was not waited for
    assert all(len(group.samples) == 2 for step in trainer.steps for group in step)  # complete groups only
    assert [line["step"] for line in lines] == [1, 2, 3]  # from 1, as the terminal and checkpoints
    written = [json.loads(x) for x in (tmp_path / "run" / "train" / "steps.jsonl").read_text().splitlines()]
    assert written == lines and [p.name for p in trainer.saved] == ["step-00002", "step-00003"]
    assert lines[0]["async"]["in_flight"] >= 2  # the straggler's samples were still running
    assert said[0] == "agentcore-rl train step 1/3: updating on 2/2 groups, 8 tokens..."  # as it starts
    assert said[1].startswith("agentcore-rl train step 1/3 done (async): reward ")
    assert any(text.startswith("agentcore-rl train step 2/3 done (async, saved step-00002)") for text in said)


def test_each_step_line_has_its_timeline_and_a_ready_batch_starts_its_update_without_a_poll(tmp_path):
    """`async.times_s` says where the trainer idled: a batch becomes ready while the trainer is idle,
    or an update ends with one ready, and the next update starts at once (well under POLL_S)."""
    lines, _, _, _ = _run(tmp_path, duration=lambda c: 0.3 if c.step <= 4 else 0.02, steps=4, max_staleness=2,
                          update_s=0.2)
    times = [line["async"]["times_s"] for line in lines]
    previous_end = 0.0
    for t in times:
        assert t["batch_ready"] <= t["update_start"] < t["update_end"] <= t["step_line"]
        assert t["update_start"] >= previous_end  # one update at a time
        assert t["update_start"] - max(t["batch_ready"], previous_end) < 0.1  # picked up at once
        previous_end = t["update_end"]
    assert times[0]["batch_ready"] >= 0.3  # the first batch waited for its rollouts (the fill)


def test_drop_policy_drops_and_counts_a_sample_more_than_k_versions_behind(tmp_path):
    # K=1: group 1 is slow; two steps train groups 1 and 2 meanwhile, so it is 2 versions behind
    lines, trainer, _, said = _run(tmp_path, duration=lambda c: 0.6 if c.step == 1 else 0.01,
                                   max_staleness=1, stragglers="drop", steps=3, batch_rows=1)
    dropped = [r for line in lines for r in line["rollouts_dropped"]]
    late = [line for line in lines if any(g.endswith("/1") for g in line["groups_trained"])]
    assert late and late[0]["step"] > 1 and late[0]["async"]["dropped_stale"] == 2
    assert sorted(dropped) == [f"{late[0]['groups_trained'][0]}/0", f"{late[0]['groups_trained'][0]}/1"]
    assert not trainer.steps[late[0]["step"] - 1]  # nothing of it reached the trainer
    for line in lines:  # every trained sample within the bound
        assert all(int(lag) <= 1 for lag in line["async"]["staleness"])
    assert any("2 dropped as stale" in text for text in said)


def test_wait_policy_waits_for_the_straggler_so_nothing_is_more_than_k_behind(tmp_path):
    lines, trainer, _, _ = _run(tmp_path, duration=lambda c: 0.8 if c.step == 1 else 0.01,
                                max_staleness=1, stragglers="wait", steps=4, batch_rows=1)
    assert sum(line["async"]["dropped_stale"] for line in lines) == 0
    trained = [g for line in lines for g in line["groups_trained"]]
    assert any(g.endswith("/1") for g in trained)  # the straggler was trained, not starved
    for line in lines:
        assert all(int(lag) <= 1 for lag in line["async"]["staleness"])
    assert sum(line["async"]["straggler_wait_s"] for line in lines) > 0.2  # the trainer waited for it


def test_wait_policy_trains_a_complete_group_it_would_leave_too_far_behind_instead_of_hanging(tmp_path):
    # K=2, one row per step: groups 1 and 3 take 1 s, the rest 10 ms. Steps 1-2 train groups 2 and 4
    # meanwhile; step 3 waits for group 1 (live, 2 behind). When 1 and 3 are both done and nothing is
    # in flight, group 3 (version 0) left out of step 3 would be 3 behind: it joins step 3. The loop
    # used to wait for it as for a straggler, with nothing to wait on: it spun at 100% CPU forever.
    done = []
    worker = threading.Thread(daemon=True, target=lambda: done.append(_run(
        tmp_path, duration=lambda c: 1.0 if c.step in (1, 3) else 0.01, max_staleness=2, stragglers="wait",
        steps=4, batch_rows=1, concurrency=16)))
    worker.start()
    worker.join(timeout=60)
    assert done, "the async loop did not finish: it hung with complete groups and nothing in flight"
    lines = done[0][0]
    trained = [g for line in lines for g in line["groups_trained"]]
    assert len(trained) == len(set(trained))  # none twice
    assert [len(line["groups_trained"]) for line in lines] == [1, 1, 2, 1]  # groups 1 and 3 in step 3
    assert {g.rsplit("/", 1)[1] for g in lines[2]["groups_trained"]} == {"1", "3"}
    assert sum(line["async"]["dropped_stale"] for line in lines) == 0
    for line in lines:
        assert all(int(lag) <= 2 for lag in line["async"]["staleness"])


def _sample_keys(trainer):
    return [sample.rollout_key for step in trainer.steps for group in step for sample in group.samples]


def _launch(group_id):
    return int(group_id.rsplit("/", 1)[1])


@pytest.mark.parametrize(("finished", "size", "fraction", "ready"), [
    (2, 4, 0.5, True), (1, 4, 0.5, False), (2, 4, 0.75, False), (3, 4, 0.75, True), (4, 4, 0.5, False),
    (1, 2, 0.5, False), (2, 3, 0.5, True), (2, 3, 0.1, True), (1, 3, 0.1, False), (8, 16, 0.5, True),
])
def test_a_group_trains_partially_only_with_at_least_the_fraction_and_two_finished(finished, size, fraction,
                                                                                   ready):
    # complete groups are simply ready; fewer than 2 samples give GRPO no baseline
    assert partial_ready(finished=finished, size=size, min_fraction=fraction) is ready


def test_partial_policy_trains_a_groups_finished_samples_and_never_its_late_straggler(tmp_path):
    # K=1, one row a step, groups of 4 needing 3 samples: group 1's sample 3 takes 0.8 s, group 2
    # ends at 0.1 s. Group 1 trains its 3 finished samples (step 1, or step 2 after group 2 if the
    # machine is slow) instead of waiting; sample 3 (a thread: it cannot be stopped) ends later, is
    # recorded, and is never trained.
    scored = []
    durations = {(1, 3): 0.8, (2, 0): 0.1, (2, 1): 0.1, (2, 2): 0.1, (2, 3): 0.1}
    lines, trainer, _, said = _run(
        tmp_path, duration=lambda c: durations.get((c.step, c.sample_index), 0.01), samples=4, steps=4,
        batch_rows=1, max_staleness=1, stragglers="partial", min_group_fraction=0.75, update_s=0.3,
        scored=scored)
    assert sorted(_launch(line["groups_trained"][0]) for line in lines[:2]) == [1, 2]
    assert all(len(line["groups_trained"]) == 1 for line in lines)
    index = next(i for i, line in enumerate(lines) if _launch(line["groups_trained"][0]) == 1)
    line, group_1 = lines[index], lines[index]["groups_trained"][0]
    assert (line["async"]["cut_stragglers"], line["async"]["partial_groups"]) == (1, 1)
    assert line["rollouts_cut"] == [f"{group_1}/3"] and line["rollouts"] == 3
    assert [other["async"]["cut_stragglers"] for other in lines] == [int(other is line) for other in lines]
    partial, = trainer.steps[index]
    assert [sample.rollout_key for sample in partial.samples] == [f"{group_1}/{i}" for i in range(3)]
    # GRPO's baseline is the mean of the samples present (rewards 0, 1, 0), not of four
    items, _ = build_batch([partial], normalize_std=False)
    assert {item.rollout_key: round(item.advantage, 6) for item in items} == {
        f"{group_1}/0": round(-1 / 3, 6), f"{group_1}/1": round(2 / 3, 6), f"{group_1}/2": round(-1 / 3, 6)}
    assert (1, 3) in scored  # the straggler ended during the run and was recorded ...
    keys = _sample_keys(trainer)
    assert f"{group_1}/3" not in keys and len(keys) == len(set(keys)) == 3 + 4 + 4 + 4  # ... never trained
    assert any("1 stragglers cut from 1 partial group," in text for text in said)


def test_partial_policy_stops_the_stragglers_it_cuts_so_their_slots_start_new_groups(tmp_path):
    # one group fits the runtime's 4 slots; sample 3 of group 1 would run 30 s. Cut, it is cancelled
    # (the harness's futures stop the session), never scored, and the next groups start at once.
    scored = []
    started = time.monotonic()
    lines, trainer, rollouts, _ = _run(
        tmp_path, duration=lambda c: 30.0 if (c.step, c.sample_index) == (1, 3) else 0.01, samples=4, steps=3,
        batch_rows=1, max_staleness=1, stragglers="partial", min_group_fraction=0.75, concurrency=4,
        update_s=0.2, sessions=Sessions, scored=scored)
    assert time.monotonic() - started < 20  # the straggler would have run 30 s
    assert rollouts.cancelled == [(1, 3)] and (1, 3) not in scored
    assert lines[0]["rollouts_cut"] == [f"{lines[0]['groups_trained'][0]}/3"]
    assert [len(group.samples) for step in trainer.steps for group in step] == [3, 4, 4]
    assert rollouts.most_live <= 4
    rollouts.loop.close()


def test_partial_policy_prefers_complete_groups_and_cuts_one_before_it_falls_more_than_k_behind(tmp_path):
    # K=2, one row a step. Group 1 has 2 of 4 samples at 0.2 s (enough at 0.5), the others take 2 s;
    # group 3 is complete at 0.1 s. Step 2 takes group 3 although group 1 started first; step 3
    # (version 2) would leave group 1 three versions behind: its two finished samples join it.
    durations = {(1, 0): 0.2, (1, 1): 0.2, (1, 2): 2.0, (1, 3): 2.0}
    lines, trainer, _, _ = _run(
        tmp_path, duration=lambda c: durations.get((c.step, c.sample_index), 0.1 if c.step == 3 else 0.01),
        samples=4, steps=4, batch_rows=1, max_staleness=2, stragglers="partial", update_s=0.3, concurrency=12)
    assert [sorted(_launch(g) for g in line["groups_trained"]) for line in lines][:3] == [[2], [3], [1, 4]]
    assert [line["async"]["cut_stragglers"] for line in lines[1:3]] == [0, 2]
    group_1 = next(g for g in lines[2]["groups_trained"] if _launch(g) == 1)
    assert lines[2]["rollouts_cut"] == [f"{group_1}/2", f"{group_1}/3"]
    assert lines[2]["wall_time_s"]["total"] < 1.5  # did not wait for the stragglers
    assert sorted(len(group.samples) for group in trainer.steps[2]) == [2, 4]
    for line in lines:
        assert all(int(lag) <= 2 for lag in line["async"]["staleness"])


def test_partial_policy_waits_like_wait_until_a_group_has_enough_then_trains_what_finished(tmp_path):
    # K=1: group 1 has 1 of 4 samples at once, a 2nd at 0.5 s, the last two at 1.5 s. Step 2 would
    # leave it 2 versions behind; with too few samples to train it waits (as `wait` does), and at
    # 0.5 s trains group 1's two finished samples beside group 3 rather than wait for the others.
    durations = {0: 0.01, 1: 0.5, 2: 1.5, 3: 1.5}
    lines, trainer, _, _ = _run(
        tmp_path, duration=lambda c: durations[c.sample_index] if c.step == 1 else 0.01, samples=4, steps=3,
        batch_rows=1, max_staleness=1, stragglers="partial", update_s=0.2)
    assert [sorted(_launch(g) for g in line["groups_trained"]) for line in lines][:2] == [[2], [1, 3]]
    assert 0.15 < lines[1]["async"]["straggler_wait_s"] and lines[1]["wall_time_s"]["total"] < 1.4
    assert lines[1]["async"]["cut_stragglers"] == 2 and lines[1]["async"]["partial_groups"] == 1
    for line in lines:
        assert all(int(lag) <= 1 for lag in line["async"]["staleness"]) and line["async"]["dropped_stale"] == 0
    assert sorted(len(group.samples) for group in trainer.steps[1]) == [2, 4]


def test_starts_are_paced_so_sampling_runs_at_most_k_steps_ahead(tmp_path):
    # fast rollouts and a slow update: without pacing the sampler would run far ahead
    lines, trainer, rollouts, _ = _run(tmp_path, duration=lambda c: 0.01, max_staleness=1, steps=4,
                                       batch_rows=1, update_s=0.3, concurrency=16)
    started_groups = sorted({launch: steps for launch, steps in rollouts.started}.items())
    for launch, steps_done in started_groups:  # (K + 1) x batch_rows groups started and untrained at most
        assert (launch - 1) - steps_done < 2  # launches count from 1
    assert sum(line["async"]["paced_starts"] for line in lines) >= 1
    assert len(started_groups) == 4  # no group started that no step needs


def test_rollouts_in_flight_never_exceed_the_runtimes_concurrency(tmp_path):
    _, _, rollouts, _ = _run(tmp_path, duration=lambda c: 0.05, max_staleness=4, steps=3, concurrency=4)
    assert rollouts.most_live <= 4


def test_a_failed_update_stops_the_loop_with_the_trainers_error_and_no_step_line(tmp_path):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], train=4, test=0)
    trainer = RecordingTrainer()
    rollouts = Rollouts(trainer, lambda c: 0.01)
    plan = TrainPlan(steps=3, batch_rows=1, group_size=None, checkpoint_every=1, seed=1, mode="async")
    loop = AsyncTrainingLoop(plan=plan, specs=[spec], submit=rollouts.submit, trainer=trainer,
                             score=Scorer(run_id="r", call=lambda f, *a, **k: f(*a, **k), fixtures=dict).score,
                             run_dir=tmp_path / "run", write=lambda text: None, concurrency=4)

    def update(groups):
        future = concurrent.futures.Future()
        future.set_exception(RuntimeError("trainer died"))
        return future

    with pytest.raises(RuntimeError, match="trainer died"):
        loop.run(update)
    assert not (tmp_path / "run" / "train" / "steps.jsonl").exists() and not trainer.saved


def test_ctrl_c_during_an_update_says_the_step_is_discarded(tmp_path, monkeypatch):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], train=4, test=0)
    trainer, said = RecordingTrainer(), []
    rollouts = Rollouts(trainer, lambda c: 0.01)
    plan = TrainPlan(steps=3, batch_rows=1, group_size=None, checkpoint_every=1, seed=1, mode="async")
    loop = AsyncTrainingLoop(plan=plan, specs=[spec], submit=rollouts.submit, trainer=trainer,
                             score=Scorer(run_id="r", call=lambda f, *a, **k: f(*a, **k), fixtures=dict).score,
                             run_dir=tmp_path / "run", write=said.append, concurrency=4)
    started = []

    def update(groups):  # an update that never ends; Ctrl-C lands while the loop waits on it
        started.append(concurrent.futures.Future())
        return started[-1]

    wait = concurrent.futures.wait

    def wait_or_ctrl_c(futures, **kwargs):  # what Ctrl-C / SIGTERM raise in the waiting thread
        if started:
            raise KeyboardInterrupt
        return wait(futures, **kwargs)

    monkeypatch.setattr(concurrent.futures, "wait", wait_or_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        loop.run(update)
    assert said[-1] == (
        "agentcore-rl train step 1/3: stopped during its update; the step is discarded (no steps.jsonl line, "
        "no checkpoint). Its 2 rollouts stay in rollouts.jsonl; a resume sets them aside and trains again "
        "from step 1 (no checkpoint yet).")
    assert started[0].cancelled() and not (tmp_path / "run" / "train" / "steps.jsonl").exists()


def test_the_time_budget_ends_async_training_after_a_step_checkpointed_with_what_is_in_flight_stopped(tmp_path):
    from test_train_loop import _budget_adapter

    clock, made = [100.0], []

    def adapt(trainer):
        adapter, log = _budget_adapter(tmp_path, trainer, minutes=230 / 60, steps=5, clock=clock,
                                       signal=False)
        made.append(log)
        return adapter

    def on_update():  # each update takes 60 s on the budget's clock: after step 3, 180 + 60 > 230
        clock[0] += 60

    # groups 7 on (after the 3 steps' 6) take 30 s: in flight when the budget stops training
    started = time.monotonic()
    lines, trainer, sessions, said = _run(
        tmp_path, duration=lambda case: 30.0 if case.step > 6 else 0.01, steps=5, max_staleness=2,
        stragglers="drop", sessions=Sessions, adapt=adapt, on_update=on_update)
    assert [line["step"] for line in lines] == [1, 2, 3] and len(trainer.steps) == 3
    assert [p.name for p in trainer.saved] == ["step-00002", "step-00003"]  # the stop step is checkpointed
    (stop,) = lines[2]["recipe"]
    assert stop["key"] == "trainer.steps" and stop["value"] == 3 and [c.key for c in made[0].choices] == ["trainer.steps"]
    written = [json.loads(x) for x in (tmp_path / "run" / "train" / "steps.jsonl").read_text().splitlines()]
    assert written == lines and "kl_initial" not in lines[0]  # the async loop's adapter: the budget only
    trained = {g for line in lines for g in line["groups_trained"]}
    untrained = {launch for launch, _ in sessions.started} - {int(g.rsplit("/", 1)[1]) for g in trained}
    assert time.monotonic() - started < 20  # their 30 s sessions were not waited for: they were stopped
    deadline = time.monotonic() + 5  # each session sees its cancellation on its loop, soon after
    while not untrained <= {launch for launch, _ in sessions.cancelled} and time.monotonic() < deadline:
        time.sleep(0.02)
    assert untrained and untrained <= {launch for launch, _ in sessions.cancelled}  # stopped, never trained
    assert "agentcore-rl train: training stopped after step 3 of 5 for the time budget (recipe.time_budget_min), " \
           "checkpoint step-00003 saved" in said
    assert any(text.startswith("agentcore-rl async: training done; ") and "stopped (never trained)" in text
               for text in said)
    sessions.loop.close()
