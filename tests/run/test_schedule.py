"""`run/schedule.py`: items go out at once; a caller waits for one or a batch; replays are kept."""

import concurrent.futures

import pytest
from run_fakes import make_spec
from terminal_lines import Lines

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.progress import Progress
from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Case, Episode
from agentcore_rl_harness.run.schedule import Scheduler, episode_or_failure


def _episode(case):
    return Episode(case=case, session_id=f"arl-{case.row_id}", turns=1, usage=Usage(completion_tokens=5), traces=(),
                   outcome=SessionOutcome(Status.COMPLETED, {}, None, 0.0))


class Submit:
    """Hands out futures the test finishes by hand (`finish`), recording each submitted case."""

    def __init__(self):
        self.futures = {}

    def __call__(self, case):
        future = concurrent.futures.Future()
        self.futures[case.row_id, case.phase] = future
        return future

    def finish(self, case):
        self.futures[case.row_id, case.phase].set_result(_episode(case))


@pytest.fixture
def cases(tmp_path):
    spec = make_spec(tmp_path)
    return [Case(spec=spec, row={"id": f"r{i}"}, sample_index=0, phase="eval") for i in range(3)]


def _scheduler(submit, terminal=None):
    return Scheduler(submit=submit, progress=Progress(terminal, style="lines", every_pct=100), live_sessions=lambda: 0)


def test_items_go_out_at_once_and_each_caller_waits_for_its_own(cases):
    submit = Submit()
    scheduler = _scheduler(submit)
    scheduler.schedule([(f"item{i}", case) for i, case in enumerate(cases)], done={})
    assert len(submit.futures) == 3 and set(scheduler.pending) == {"item0", "item1", "item2"}
    submit.finish(cases[1])
    handle = scheduler.handle("item1")
    assert handle.session_id == "arl-r1" and scheduler.handle("item1") is handle
    with pytest.raises(HarnessError, match="no rollout was scheduled for nope"):
        scheduler.handle("nope")


def test_finished_rollouts_of_a_resumed_run_are_replayed_not_rerun(cases):
    from agentcore_rl_harness.run.plan import case_key
    from agentcore_rl_harness.run.scoring import RolloutHandle, Verdict, make_rollout

    episode = _episode(cases[0])
    recorded = make_rollout(run_id="x", case=cases[0], episode=episode, handle=RolloutHandle(episode),
                            verdict=Verdict(Status.COMPLETED, None, True), step=None)
    submit = Submit()
    scheduler = _scheduler(submit)
    scheduler.schedule([("a", cases[0]), ("b", cases[1])], done={case_key(recorded): recorded})
    assert set(scheduler.replayed) == {"a"} and set(scheduler.pending) == {"b"}
    assert list(submit.futures) == [("r1", "eval")]
    assert scheduler.handle("a").session_id == "arl-r0"


def test_a_batch_waits_for_all_and_shows_progress(cases):
    terminal = Lines()

    def submit(case):
        future = concurrent.futures.Future()
        future.set_result(_episode(case))
        return future

    scheduler = _scheduler(submit, terminal)
    episodes = scheduler.run_batch(cases)
    assert [e.case for e in episodes] == cases
    scheduler.tick(force=True)
    assert terminal.lines and "3/3" in terminal.lines[-1]


def test_why_an_episode_is_missing(cases):
    future = concurrent.futures.Future()
    assert episode_or_failure(future) == (None, "rollout did not finish")
    future.set_exception(RuntimeError("loop died"))
    assert episode_or_failure(future) == (None, "RuntimeError: loop died")
    cancelled = concurrent.futures.Future()
    cancelled.cancel()
    assert episode_or_failure(cancelled) == (None, "rollout was cancelled")


def test_a_batch_is_scored_as_each_rollout_finishes_so_success_shows_during_the_phase(cases):
    import threading

    submit = Submit()
    scheduler = _scheduler(submit)
    batch = scheduler.start_batch(cases)
    submit.finish(cases[2])
    scored, seen = [], []

    def score(index, episode):
        scored.append(index)
        snapshot = scheduler.progress.snapshot()
        seen.append(snapshot.scored)
        scheduler.progress.rollout_scored(True)
        if index == 2:  # the others finish only after the first one is scored
            threading.Timer(0.05, lambda: [submit.finish(case) for case in cases[:2]]).start()
        return episode.session_id

    assert batch.scored(score) == ["arl-r0", "arl-r1", "arl-r2"]  # the cases' order
    assert scored[0] == 2 and sorted(scored) == [0, 1, 2]  # the finished one first, while 2 ran
    assert seen[0] == 0 and scheduler.progress.snapshot().scored == 3
