"""`run/core.py`: whole runs over the fakes (ScriptedSampler, FakeRuntime, a recording trainer),
driven as pytest drives them but without pytest: plan, start, score each item, finish."""

import json

import pytest
from run_driver import drive_items
from run_fakes import FAST, RecordingTrainer, make_spec, said_four
from terminal_lines import Lines

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.lifecycle import RunState
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.run.plan import TrainItem

TRAIN = ["trainer.steps=2", "trainer.batch_rows=1", "trainer.checkpoint_every=1"]


def _run(tmp_path, mode, harness, *overrides, terminal=None):
    return Run.made(RunOptions(mode=mode, overrides=(*FAST, *overrides), rootdir=tmp_path, out=tmp_path / "out"),
                    terminal=terminal, harness=harness)


def _drive(run, specs):
    """What the plugin does: plan, start, then per item its body and its verdict."""
    items = [(f"{spec.name}::{index}", item) for spec in specs for index, item in enumerate(run.plan(spec))]
    return drive_items(run, items, lambda item_id, item: {} if isinstance(item, TrainItem) else {
        "rollout": run.rollout_for(item_id), "row": dict(item.row)})


def _records(run):
    return [json.loads(line) for line in (run.run_dir / "rollouts.jsonl").read_text().splitlines()]


def test_an_eval_run_records_every_item_and_writes_its_reports(tmp_path, build_harness):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four])
    terminal = Lines()
    run = _run(tmp_path, "eval", build_harness(), terminal=terminal)
    outcomes = _drive(run, [spec])
    assert sorted(outcomes.values()) == ["AssertionError", "AssertionError", "passed", "passed"]
    assert not run.finish()  # failed tasks are data: the run itself did not fail
    records = _records(run)
    assert len(records) == 4 and {r["phase"] for r in records} == {"eval"}
    assert sorted(r["status"] for r in records) == ["completed", "completed", "task_failed", "task_failed"]
    assert all(r["traces"] and r["session_id"].startswith("arl-") for r in records)
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["overall"]["success_rate"]["value"] == 0.5 and report["overall"]["success_rate"]["n"] == 4
    assert {"report.md", "report.html", "junit.xml", "config.yaml"} <= {p.name for p in run.run_dir.iterdir()}
    assert any("run directory" in line for line in terminal.lines)
    assert run.summary_lines()[-1] == f"agentcore-rl run directory: {run.run_dir}"
    assert run.recorded("toy::0").session_id == records[0]["session_id"]


def test_a_run_moves_through_its_states_once_and_a_stopped_one_says_how_to_resume(tmp_path, build_harness):
    spec = make_spec(tmp_path, samples=1, rewards=[said_four])
    options = RunOptions(mode="eval", overrides=tuple(FAST), rootdir=tmp_path, out=tmp_path / "out",
                         args=("tasks", "--agentcore-rl", "eval", "--agentcore-rl-out", "out", "-k", "toy"))
    run = Run.made(options, terminal=None, harness=build_harness())
    assert run.state is RunState.CONFIGURED and not run.item_finished()  # nothing in flight: no line
    _drive(run, [spec])
    assert run.state is RunState.ITEMS
    with pytest.raises(AttributeError):
        run.state = RunState.FINISHED  # only the run's own methods move it
    with pytest.raises(AttributeError, match="Run.options is set once, when the run is made"):
        run.options = options
    with pytest.raises(HarnessError, match="the run cannot start: it is items already"):
        run.start([])
    run.finish(interrupted=True)
    assert run.state is RunState.INTERRUPTED
    resume = json.loads((run.run_dir / "report.json").read_text())["interrupted"]["resume"]
    assert resume == f"pytest tasks -k toy --agentcore-rl-resume {run.run_dir.resolve()}"
    with pytest.raises(HarnessError, match="the run cannot finish: it is interrupted already"):
        run.finish()


def test_a_run_mode_run_pre_evaluates_trains_then_post_evaluates(tmp_path, build_harness):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], test=1, train=2)
    trainer = RecordingTrainer()
    run = _run(tmp_path, "run", build_harness(*TRAIN, trainer=trainer), *TRAIN)
    outcomes = _drive(run, [spec])
    assert len(outcomes) == 2 and not run.finish()
    phases = [r["phase"] for r in _records(run)]
    assert phases.count("pre") == 2 and phases.count("train") == 4 and phases.count("post") == 2
    assert len(trainer.steps) == 2 and [p.name for p in trainer.saved] == ["step-00001", "step-00002"]
    steps = (run.run_dir / "train" / "steps.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in steps] == [1, 2]
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["pre"] is not None and report["delta"] is not None


def test_a_failed_training_fails_the_run_and_every_item_says_why(tmp_path, build_harness):
    class Broken(RecordingTrainer):
        async def step(self, *, groups):
            raise RuntimeError("out of memory")

    spec = make_spec(tmp_path, rewards=[said_four], test=1, train=1)
    run = _run(tmp_path, "train", build_harness(*TRAIN, trainer=Broken()), *TRAIN)
    outcomes = _drive(run, [spec])
    assert outcomes == {"toy::0": "HarnessError"}
    with pytest.raises(HarnessError, match=r"^training failed: RuntimeError: out of memory$"):
        run.run_item("toy::0", lambda: None, {})
    assert run.finish()  # an infrastructure error: the run fails
    assert "1 infrastructure error(s)" in " ".join(run.summary_lines())


def test_a_train_mode_item_passes_when_training_finished(tmp_path, build_harness):
    spec = make_spec(tmp_path, rewards=[said_four], test=1, train=1)
    run = _run(tmp_path, "train", build_harness(*TRAIN, trainer=RecordingTrainer()), *TRAIN)
    assert _drive(run, [spec]) == {"toy::0": "passed"}
    assert not run.finish()
    assert {r["phase"] for r in _records(run)} == {"train"}


def test_a_run_where_nothing_ran_writes_nothing_but_still_judges_gates(tmp_path, build_harness):
    run = _run(tmp_path, "eval", build_harness(), "gates.min_success_rate=0.5")
    run.start([])
    assert run.finish()  # no rollout: a success rate of nothing fails the gate
    assert not (tmp_path / "out").exists()
    assert run.summary_lines()[0] == "agentcore-rl eval: no rollout ran, so no run directory was written"


def test_a_failure_outside_any_task_fails_the_run(tmp_path, build_harness):
    run = _run(tmp_path / "failed", "eval", build_harness())
    run.record_item("test_plain.py::test_x", passed=False, error="boom")
    assert run.finish()
    run = _run(tmp_path / "passed", "eval", build_harness())
    run.record_item("test_plain.py::test_x", passed=True)
    assert not run.finish()


def test_a_resumed_run_replays_finished_items_and_reruns_the_rest(tmp_path, build_harness):
    spec = make_spec(tmp_path, samples=1, rewards=[said_four], test=2)
    first = _run(tmp_path, "eval", build_harness())
    items = [(f"toy::{i}", item) for i, item in enumerate(first.plan(spec))]
    first.start(items)
    first.rollout_for("toy::0")
    first.run_item("toy::0", lambda rollout, row: None, {"rollout": first.rollout_for("toy::0"), "row": {}})
    first.record_item("toy::0", passed=True)
    first.finish(write_reports=False)  # stopped after one item
    second = Run.made(RunOptions(mode="eval", resume=first.run_dir, overrides=tuple(FAST), rootdir=tmp_path),
                      terminal=None, harness=build_harness())
    outcomes = _drive(second, [spec])
    assert set(second.scheduler.replayed) == {"toy::0"} and set(second.scheduler.pending) == {"toy::1"}
    assert outcomes["toy::0"] == "passed"
    second.finish()
    assert [r["row_id"] for r in _records(second)] == ["r0", "r1"]


def test_settings_of_another_trainer_kind_are_named_when_the_run_starts(tmp_path, build_harness):
    terminal = Lines()
    with pytest.warns(UserWarning, match="trainer.lr"):
        _run(tmp_path, "eval", build_harness(), "trainer=verl", "+trainer.lr=0.001", terminal=terminal)
    assert terminal.lines == [
        "agentcore-rl config: trainer=verl has no trainer.lr: a setting of another trainer kind, ignored "
        "(it applies again when that trainer is chosen)"
    ]
