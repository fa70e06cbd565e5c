"""inflight.json: the run's rollouts in flight, rewritten whole, throttled, gone at the end."""

import concurrent.futures
import json
import threading
import time

import agentcore_rl_harness as arl
from agentcore_rl_harness.run.cases import Case
from agentcore_rl_harness.run.inflight import InFlight
from agentcore_rl_harness.run.schedule import Scheduler
from agentcore_rl_harness.progress import Progress
from agentcore_rl_harness.tasks import task_spec


def _cases(count):
    spec = task_spec(arl.task(dataset="d.jsonl")(lambda rollout, row: None))
    return [Case(spec=spec, row={"id": f"r{i}"}, sample_index=i % 2, phase="train", step=3)
            for i in range(count)]


def _read(path):
    return json.loads(path.read_text())


def test_lists_each_case_queued_then_running_and_is_deleted_at_the_end(tmp_path):
    a, b = _cases(2)
    sessions = {}
    inflight = InFlight(tmp_path, session_of=lambda case: sessions.get(id(case)), every_s=0)
    first, second = concurrent.futures.Future(), concurrent.futures.Future()
    inflight.watch(a, first)
    inflight.watch(b, second)
    cases = _read(tmp_path / "inflight.json")["cases"]
    assert [(c["task"], c["row_id"], c["sample_index"], c["phase"], c["step"], c["state"]) for c in cases] == [
        (a.spec.name, "r0", 0, "train", 3, "queued"), (a.spec.name, "r1", 1, "train", 3, "queued")]
    sessions[id(a)] = ("arl-session-a", 1234.5)
    inflight.refresh()
    running = _read(tmp_path / "inflight.json")["cases"][0]
    assert (running["state"], running["session_id"], running["started_at"]) == ("running", "arl-session-a", 1234.5)
    first.set_result(None)  # a finished rollout leaves the file
    assert [c["row_id"] for c in _read(tmp_path / "inflight.json")["cases"]] == ["r1"]
    inflight.close()
    assert not (tmp_path / "inflight.json").exists()
    second.set_result(None)  # a rollout ending after the run's end does not bring the file back
    assert list(tmp_path.iterdir()) == []


def test_writes_are_throttled_and_the_last_change_is_written_late(tmp_path):
    cases = _cases(50)
    writes = []
    inflight = InFlight(tmp_path, session_of=lambda case: None, every_s=0.5)
    original = inflight._write
    inflight._write = lambda content: (writes.append(len(content["cases"])), original(content))
    futures = [concurrent.futures.Future() for _ in cases]
    for case, future in zip(cases, futures):
        inflight.watch(case, future)
    for future in futures:
        future.set_result(None)
    assert writes == [1]  # 100 changes inside the window: one write, the first
    time.sleep(0.8)  # the pending change is written once the window has passed
    assert writes == [1, 0] and _read(tmp_path / "inflight.json")["cases"] == []
    inflight.close()


def test_the_file_is_replaced_whole_never_seen_half_written(tmp_path):
    cases = _cases(200)
    inflight = InFlight(tmp_path, session_of=lambda case: None, every_s=0)
    stop, torn = threading.Event(), []

    def read_all_the_time():
        while not stop.is_set():
            try:
                text = (tmp_path / "inflight.json").read_text()
            except FileNotFoundError:
                continue
            try:
                json.loads(text)
            except ValueError:
                torn.append(text)

    reader = threading.Thread(target=read_all_the_time)
    reader.start()
    try:
        for case in cases:
            inflight.watch(case, concurrent.futures.Future())
    finally:
        stop.set()
        reader.join()
    assert torn == [] and len(_read(tmp_path / "inflight.json")["cases"]) == 200
    assert sorted(path.name for path in tmp_path.iterdir()) == ["inflight.json"]  # no temporary left
    inflight.close()


def test_no_run_directory_yet_means_no_file(tmp_path):
    inflight = InFlight(tmp_path / "not-made", session_of=lambda case: None, every_s=0)
    inflight.watch(_cases(1)[0], concurrent.futures.Future())
    assert not (tmp_path / "not-made").exists()
    inflight.close()


def test_the_scheduler_tells_it_of_every_case_and_its_end_clears_it(tmp_path):
    inflight = InFlight(tmp_path, session_of=lambda case: None, every_s=0)
    futures = []

    def submit(case):
        futures.append(concurrent.futures.Future())
        return futures[-1]

    scheduler = Scheduler(submit=submit, progress=Progress(None), live_sessions=lambda: 0, inflight=inflight)
    scheduler.schedule([(f"item{i}", case) for i, case in enumerate(_cases(2))], done={})
    scheduler.start_batch(_cases(3))
    assert len(_read(tmp_path / "inflight.json")["cases"]) == 5
    scheduler.cancel()  # the run's end (finished or stopped)
    assert not (tmp_path / "inflight.json").exists()
