"""`run/budget.py`: recipe.time_budget_min in whole runs over the fakes (ScriptedSampler,
FakeRuntime, a recording trainer whose updates and supervised steps take minutes on the
budget's clock): training stops after N < trainer.steps steps with a checkpoint of step N, the
overlapped next batch stopped, the choice in recipe.json, steps.jsonl and the report, and the
post-evaluation run; a resumed run trains no step past the stop; the automatic warm-up stops at
its share of the budget."""

import json
import time

import pytest
from run_driver import drive_items
from run_fakes import FAST, RecordingTrainer
from terminal_lines import Lines
from test_recipe import drive, spec_with_oracle

from agentcore_rl_harness.recipe import budget as budget_clock
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.run.plan import TrainItem

TRAIN = ["trainer.steps=4", "trainer.batch_rows=2", "trainer.checkpoint_every=4", "trainer.overlap_rollouts=true"]


class SlowTrainer(RecordingTrainer):
    """Each update takes `update_s`, each supervised step `sft_s`, on the budget's clock."""

    def __init__(self, clock, *, update_s=60.0, sft_s=0.0):
        super().__init__()
        self.clock, self.update_s, self.sft_s = clock, update_s, sft_s

    async def step(self, *, groups):
        self.clock.offset += self.update_s
        return await super().step(groups=groups)

    def sft_step(self, traces, *, lr=None):
        self.clock.offset += self.sft_s
        return super().sft_step(traces, lr=lr)


class Clock:
    """The monotonic clock, moved on by what the fakes say their work took."""

    offset = 0.0

    def __call__(self):
        return time.monotonic() + self.offset


@pytest.fixture
def clock(monkeypatch):
    made = Clock()
    monkeypatch.setattr(budget_clock, "now", made)
    return made


def run_of(tmp_path, build_harness, trainer, *overrides, replies=None, resume=None):
    terminal = Lines()
    harness = build_harness(*TRAIN, *overrides, trainer=trainer, replies=replies)
    options = RunOptions(mode="run", overrides=(*FAST, *TRAIN, *overrides), rootdir=tmp_path, resume=resume,
                         out=None if resume else tmp_path / "out")
    return Run.made(options, terminal=terminal, harness=harness), terminal


def test_the_budget_stops_training_after_a_checkpointed_step_and_the_post_evaluation_runs(tmp_path, build_harness,
                                                                                          clock):
    # 2.5 min = 150 s, updates of 60 s: after step 1, 60 + 60 fits; after step 2, 120 + 60 does not
    trainer = SlowTrainer(clock)
    run, terminal = run_of(tmp_path, build_harness, trainer, "recipe.time_budget_min=2.5")
    spec = spec_with_oracle(tmp_path, oracle=False)
    records, recipe = drive(run, spec)
    assert len(trainer.steps) == 2 and [p.name for p in trainer.saved] == ["step-00002"]  # not checkpoint_every's
    (stop,) = [c for c in recipe["choices"] if c["key"] == "trainer.steps"]
    assert stop["applied"] and stop["value"] == 2 and stop["at"] == "step 2"
    assert "after 2 of trainer.steps=4 steps" in stop["reason"] and "(recipe.time_budget_min=2.5)" in stop["reason"]
    observed = recipe["observations"]["time_budget"]
    assert observed["minutes"] == 2.5 and len(observed["step_walls_s"]) == 2 and observed["eval_s"] >= 0
    steps = [json.loads(line) for line in (run.run_dir / "train" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and steps[1]["recipe"] == [stop] and steps[1]["checkpoint"] == "step-00002"
    assert sorted({r["step"] for r in records if r["phase"] == "train"}) == [1, 2]  # step 3's batch: never recorded
    assert sum(r["phase"] == "post" for r in records) == 4  # the post-evaluation ran (2 test rows x 2)
    assert any("the 4 rollouts of step 3 in flight are stopped (never trained)" in line for line in terminal.lines)
    assert any(line.startswith("agentcore-rl recipe (step 2): trainer.steps = 2: training stopped early for the time "
                               "budget") for line in terminal.lines)
    report_md = (run.run_dir / "report.md").read_text()
    assert "> **NOTE** Training stopped early for the time budget: 2 of 4 trainer.steps trained" in report_md
    assert "`trainer.steps` = `2`" in report_md
    assert "Training stopped early for the time budget" in (run.run_dir / "report.html").read_text()
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["recipe"]["choices"] == recipe["choices"] and report["delta"] is not None

    # resumed with the same budget: the step the budget stopped at is the last
    again = SlowTrainer(clock)
    resumed, terminal = run_of(tmp_path, build_harness, again, "recipe.time_budget_min=2.5", resume=run.run_dir)
    items = [(f"toy::{index}", item) for index, item in enumerate(resumed.plan(spec))]
    drive_items(resumed, items, lambda item_id, item: {} if isinstance(item, TrainItem) else {
        "rollout": resumed.rollout_for(item_id), "row": dict(item.row)})
    assert not resumed.finish()
    assert [p.name for p in again.loaded] == ["step-00002"] and not again.steps
    assert any("the time budget stopped training after step 2 of trainer.steps=4 (train/steps.jsonl); a resumed run "
               "trains no step past it" in line for line in terminal.lines)
    recipe_again = json.loads((run.run_dir / "recipe.json").read_text())
    assert [c["key"] for c in recipe_again["choices"]] == [c["key"] for c in recipe["choices"]]  # kept, not rewritten


def test_no_budget_trains_every_step(tmp_path, build_harness, clock):
    trainer = SlowTrainer(clock, update_s=3600.0)  # an hour a step: no budget, no stop
    run, _ = run_of(tmp_path, build_harness, trainer)
    _, recipe = drive(run, spec_with_oracle(tmp_path, oracle=False))
    assert len(trainer.steps) == 4 and [p.name for p in trainer.saved] == ["step-00004"]
    assert not [c for c in recipe["choices"] if c["key"] == "trainer.steps"] and "time_budget" not in recipe["observations"]
    assert "time budget" not in (run.run_dir / "report.md").read_text()


def test_the_automatic_warm_up_stops_at_its_share_of_the_budget(tmp_path, build_harness, clock):
    # 10 min = 600 s, a share of 0.4 = 240 s; supervised steps of 25 s, chunks of 4: 100 s each.
    # The policy never succeeds, so only the budget stops the warm-up: after 2 chunks (200 s + 100 > 240).
    trainer = SlowTrainer(clock, sft_s=25.0, update_s=1.0)
    run, terminal = run_of(tmp_path, build_harness, trainer, "recipe.time_budget_min=10", "recipe.probe_rows=2",
                           "recipe.warmup_budget_share=0.4", replies=lambda prompt, params: "5")
    _, recipe = drive(run, spec_with_oracle(tmp_path))
    assert len(trainer.sft_batches) == 8  # recipe.warmup_max_steps (24) was not reached
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert warmup["value"]["steps"] == 8 and "recipe.warmup_budget_share=0.4 of the budget of 600s" in warmup["reason"]
    assert len(trainer.steps) == 4  # training itself fits: 200 s + 4 x 1 s


def test_a_budget_spent_before_training_says_so_loudly_and_trains_one_step(tmp_path, build_harness, clock):
    trainer = SlowTrainer(clock, update_s=1.0)
    run, terminal = run_of(tmp_path, build_harness, trainer, "recipe.time_budget_min=0.01")
    clock.offset = 1.0  # the run's start (its model, its benchmark) took 1 s of the budget's 0.6
    _, recipe = drive(run, spec_with_oracle(tmp_path, oracle=False))
    assert any("THE TIME BUDGET IS SPENT BEFORE TRAINING" in line for line in terminal.lines)
    assert len(trainer.steps) == 1 and [p.name for p in trainer.saved] == ["step-00001"]
    (stop,) = [c for c in recipe["choices"] if c["key"] == "trainer.steps"]
    assert stop["value"] == 1


def test_a_budget_in_a_mode_that_trains_nothing_is_said_to_change_nothing(tmp_path, build_harness):
    terminal = Lines()
    Run.made(RunOptions(mode="eval", overrides=(*FAST, "recipe.time_budget_min=5"), rootdir=tmp_path,
                        out=tmp_path / "out"), terminal=terminal, harness=build_harness("recipe.time_budget_min=5"))
    assert terminal.lines == ["agentcore-rl config: recipe.time_budget_min=5 sizes training; --agentcore-rl eval "
                              "trains nothing, so it changes nothing here"]


def test_the_final_evaluations_estimate_is_the_longest_evaluation_before_training(tmp_path, clock):
    # office 1m: the pre-evaluation took 56 s, the one after the warm-up 2 min 7 s (a warmed-up
    # agent's episodes run longer); the post-evaluation is estimated from the longer
    from agentcore_rl_harness.recipe.choices import RecipeLog
    from agentcore_rl_harness.recipe.config import RecipeConfig
    from agentcore_rl_harness.run.budget import RunBudget

    config = type("Typed", (), {"recipe": RecipeConfig(time_budget_min=20)})()
    made = RunBudget.of(config, RecipeLog(lambda line: None), run_dir=tmp_path, started=clock(), write=print)
    for wall in (56.0, 127.0, 90.0):  # pre, after the warm-up, (a shorter one changes nothing)
        with made.evaluation():
            clock.offset += wall
    assert made.budget.eval_s == pytest.approx(127.0, abs=1.0)
    assert json.loads((tmp_path / "recipe.json").read_text())["observations"]["time_budget"]["eval_s"] == pytest.approx(127.0, abs=1.0)
