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
from agentcore_rl_harness.run.scoring import Scorer
from agentcore_rl_harness.run.training import TrainPlan


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
        last = self.trainer.policy_version
        with self.lock:
            self.live -= 1
        trace = Trace(token_ids=(1, 2, 3, 4), prompt_length=1, loss_mask=(1, 0, 1), logprobs=(-0.5, None, -0.25),
                      finish_reason="stop", metadata={"policy_versions": sorted({first, last})})
        reply = "4" if case.sample_index % 2 else "5"
        return Episode(case=case, session_id=f"s{case.step}-{case.sample_index}", traces=(trace,), turns=2,
                       usage=Usage(), outcome=SessionOutcome(Status.COMPLETED, {"reply": reply}, None, 0.0))


def _run(tmp_path, *, duration, steps=4, batch_rows=2, max_staleness=1, stragglers="wait", concurrency=8,
         update_s=0.05, train_rows=6):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], train=train_rows, test=0)
    trainer = RecordingTrainer()
    rollouts = Rollouts(trainer, duration)
    scorer = Scorer(run_id="run", call=lambda f, *a, **k: f(*a, **k), fixtures=dict)
    plan = TrainPlan(steps=steps, batch_rows=batch_rows, group_size=None, checkpoint_every=2, seed=1,
                     mode="async", max_staleness=max_staleness, stragglers=stragglers)
    said = []
    loop = AsyncTrainingLoop(plan=plan, specs=[spec], submit=rollouts.submit, score=scorer.score, trainer=trainer,
                             run_dir=tmp_path / "run", write=said.append, concurrency=concurrency)
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def update(groups):
        def body():
            time.sleep(update_s)
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
