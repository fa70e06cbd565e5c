"""`run/training.py`: rows -> groups -> trainer steps, steps.jsonl, checkpoints, resume order."""

import asyncio
import json

import pytest

from run_fakes import RecordingTrainer, make_spec, said_four

from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Episode
from agentcore_rl_harness.run.scoring import Scorer
from agentcore_rl_harness.run.training import TrainingLoop, TrainPlan


class _Ready:
    """A batch whose episodes are ready (`training.Batch`); records whether it was cancelled."""

    def __init__(self, episodes):
        self.episodes, self.cancelled = episodes, False

    def wait(self):
        return self.episodes

    def cancel(self):
        self.cancelled = True


def _loop(tmp_path, trainer, *, steps=3, start_step=0, statuses=None, lines=None, overlap=False, events=None):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], train=3, test=0)
    scorer = Scorer(run_id="run", call=lambda f, *a, **k: f(*a, **k), fixtures=dict)
    batches = []
    counter = iter(range(10**6))

    def start_cases(cases):
        batches.append(cases)
        if events is not None:
            events.append(("start", cases[0].step))
        return _Ready([Episode(case=case, session_id=f"arl-{i}", turns=1, usage=Usage(), traces=(),
                               outcome=SessionOutcome((statuses or {}).get(i, Status.COMPLETED),
                                                      {"reply": "4" if next(counter) % 2 else "5"}, None, 0.0))
                       for i, case in enumerate(cases)])

    plan = TrainPlan(steps=steps, batch_rows=2, group_size=None, checkpoint_every=2, seed=1, overlap=overlap)
    loop = TrainingLoop(plan=plan, specs=[spec], start_cases=start_cases, score=scorer.score, trainer=trainer,
                        run_dir=tmp_path / "run", write=(lines if lines is not None else []).append,
                        start_step=start_step)
    return loop, batches


def test_each_step_rolls_out_groups_trains_and_logs_one_line(tmp_path):
    trainer, said = RecordingTrainer(), []
    loop, batches = _loop(tmp_path, trainer, lines=said)
    lines = loop.run(lambda groups: asyncio.run(trainer.step(groups=groups)))
    assert [len(b) for b in batches] == [4, 4, 4]  # 2 rows x the task's 2 samples
    assert {c.phase for b in batches for c in b} == {"train"} and [b[0].step for b in batches] == [1, 2, 3]
    # one group per row drawn (a row drawn twice in a step, across an epoch's end, is one group)
    assert [sum(len(g.samples) for g in groups) for groups in trainer.steps] == [4, 4, 4]
    # one numbering: steps.jsonl's step 1 is the terminal's 1/3 and checkpoint step-00001's step
    assert [line["step"] for line in lines] == [1, 2, 3] and lines[0]["success_rate"] == 0.5
    written = [json.loads(x) for x in (tmp_path / "run" / "train" / "steps.jsonl").read_text().splitlines()]
    assert written == lines and lines[0]["loss"] == 0.5 and set(lines[0]["wall_time_s"]) == {"rollout", "train", "total"}
    assert [p.name for p in trainer.saved] == ["step-00002", "step-00003"]  # every 2, and the last
    # a line as the update starts (what it trains on) and one with its result
    assert said[0] == "agentcore-rl train step 1/3: nothing to train: 2/2 groups informative, 0 tokens"
    assert said[1].startswith("agentcore-rl train step 1/3 done: reward ") and "success 50%, loss 0.500" in said[1]
    done = [text for text in said if " done: " in text]
    assert len(done) == 3 and done[1].endswith(", saved step-00002") and not done[0].endswith("saved")
    starts = [text for text in said if text.startswith("agentcore-rl train step ") and " done: " not in text]
    assert len(starts) == 3 and all(len(text) <= 80 for text in starts)  # within the status width
    assert lines[0]["informative_groups"] == 2 and lines[0]["informative_fraction"] == 1.0
    assert [line["checkpoint"] for line in lines] == [None, "step-00002", "step-00003"]


def test_steps_that_train_no_token_warn_with_the_levers_and_loudly_from_the_second_on(tmp_path):
    trainer, said = RecordingTrainer(), []  # its traces are empty: 0 tokens trained
    loop, _ = _loop(tmp_path, trainer, steps=2, lines=said)
    loop.run(lambda groups: asyncio.run(trainer.step(groups=groups)))
    warnings = [text for text in said if "trained nothing" in text]
    assert len(warnings) == 2 and "warmup.enabled=true" in warnings[0] and "!!!!" not in warnings[0]
    assert warnings[1].startswith("!" * 78) and "That is 2 steps in a row without an update" in warnings[1]


def test_failed_rollouts_are_left_out_of_their_group_and_counted(tmp_path):
    trainer = RecordingTrainer()
    loop, _ = _loop(tmp_path, trainer, steps=1, statuses={0: Status.TIMEOUT, 1: Status.AGENT_ERROR})
    (line,) = loop.run(lambda groups: asyncio.run(trainer.step(groups=groups)))
    assert line["excluded"]["timeout"] == 1 and line["excluded"]["agent_error"] == 1
    assert sum(len(g.samples) for g in trainer.steps[0]) == 2


def test_a_resumed_loop_continues_the_same_row_order(tmp_path):
    (tmp_path / "whole").mkdir()
    (tmp_path / "resumed").mkdir()
    whole, whole_batches = _loop(tmp_path / "whole", RecordingTrainer())
    whole.run(lambda groups: asyncio.run(RecordingTrainer().step(groups=groups)))
    resumed, resumed_batches = _loop(tmp_path / "resumed", RecordingTrainer(), start_step=2)
    resumed.run(lambda groups: asyncio.run(RecordingTrainer().step(groups=groups)))
    assert len(resumed_batches) == 1 and resumed_batches[0][0].step == 3
    assert [c.row_id for c in resumed_batches[0]] == [c.row_id for c in whole_batches[2]]


def test_overlap_starts_the_next_steps_rollouts_before_this_steps_update(tmp_path):
    """trainer.overlap_rollouts: step k+1's batch starts before step k's update; without it, after.
    The same rows, lines and checkpoints either way."""
    runs = {}
    for overlap in (False, True):
        events, trainer = [], RecordingTrainer()
        (tmp_path / str(overlap)).mkdir()
        loop, batches = _loop(tmp_path / str(overlap), trainer, overlap=overlap, events=events)

        def step_once(groups, trainer=trainer, events=events):
            events.append(("update", len(trainer.steps)))
            return asyncio.run(trainer.step(groups=groups))

        lines = loop.run(step_once)
        runs[overlap] = events, [[c.row_id for c in b] for b in batches], lines, trainer.saved
    assert runs[True][0] == [("start", 1), ("start", 2), ("update", 0), ("start", 3), ("update", 1), ("update", 2)]
    assert runs[False][0] == [("start", 1), ("update", 0), ("start", 2), ("update", 1), ("start", 3), ("update", 2)]
    assert runs[True][1] == runs[False][1] and len(runs[True][1]) == 3  # no batch past the last step
    strip = lambda lines: [{k: v for k, v in line.items() if k != "wall_time_s"} for line in lines]  # noqa: E731
    assert strip(runs[True][2]) == strip(runs[False][2])
    assert [p.name for p in runs[True][3]] == ["step-00002", "step-00003"]


def test_a_failed_update_cancels_the_next_steps_rollouts(tmp_path):
    started = []
    loop, _ = _loop(tmp_path, RecordingTrainer(), overlap=True)
    start = loop.start_cases
    loop.start_cases = lambda cases: started.append(start(cases)) or started[-1]

    def step_once(groups):
        raise RuntimeError("trainer died")

    with pytest.raises(RuntimeError, match="trainer died"):
        loop.run(step_once)
    assert [batch.cancelled for batch in started] == [False, True]  # step 1's batch was in flight


def test_ctrl_c_in_an_update_says_the_step_is_discarded_and_cancels_the_next_batch(tmp_path):
    started, said = [], []
    loop, _ = _loop(tmp_path, RecordingTrainer(), overlap=True, lines=said)
    start = loop.start_cases
    loop.start_cases = lambda cases: started.append(start(cases)) or started[-1]
    (tmp_path / "run" / "checkpoints" / "step-00001").mkdir(parents=True)  # as if step 1 were done

    def step_once(groups):
        raise KeyboardInterrupt  # what Ctrl-C / SIGTERM raise in pytest's thread

    with pytest.raises(KeyboardInterrupt):
        loop.run(step_once)
    assert said[-1] == (
        "agentcore-rl train step 1/3: stopped during its update; the step is discarded (no steps.jsonl "
        "line, no checkpoint). Its 4 rollouts stay in rollouts.jsonl; a resume sets them aside and "
        "trains again after checkpoint step-00001 (step 2 on).")
    assert not (tmp_path / "run" / "train" / "steps.jsonl").exists()
    assert [batch.cancelled for batch in started] == [False, True]


def _budget_adapter(tmp_path, trainer, *, minutes, steps, clock, signal=True):
    """The run's step adapter with a time budget on `clock` (`recipe.py`, `budget.py`)."""
    from agentcore_rl_harness.recipe.budget import TimeBudget
    from agentcore_rl_harness.recipe.choices import RecipeLog
    from agentcore_rl_harness.recipe.config import RecipeConfig
    from agentcore_rl_harness.run.budget import RunBudget
    from agentcore_rl_harness.run.recipe import StepAdapter

    config, log, run_dir = RecipeConfig(time_budget_min=minutes), RecipeLog(lambda text: None), tmp_path / "run"
    budget = RunBudget(TimeBudget(minutes, started=clock[0], clock=lambda: clock[0]), log, run_dir=run_dir,
                       write=log.write)
    budget.training_starts()
    return StepAdapter(config, log, run_dir=run_dir, trainer=trainer, group_size=2, steps=steps, budget=budget,
                       signal=signal), log


def test_the_time_budget_ends_training_after_a_step_checkpointed_with_the_next_batch_stopped(tmp_path):
    trainer, said, clock = RecordingTrainer(), [], [100.0]
    loop, _ = _loop(tmp_path, trainer, steps=5, overlap=True, lines=said)
    started = []
    start = loop.start_cases
    loop.start_cases = lambda cases: started.append(start(cases)) or started[-1]
    loop.adapt, log = _budget_adapter(tmp_path, trainer, minutes=3, steps=5, clock=clock)

    def step_once(groups):  # each update takes 50 s on the budget's clock: after step 3, 150 + 50 > 180
        clock[0] += 50
        return asyncio.run(trainer.step(groups=groups))

    lines = loop.run(step_once)
    assert [line["step"] for line in lines] == [1, 2, 3] and len(trainer.steps) == 3
    assert [p.name for p in trainer.saved] == ["step-00002", "step-00003"]  # the stop step, checkpoint_every or not
    assert [line["checkpoint"] for line in lines] == [None, "step-00002", "step-00003"]
    assert [batch.cancelled for batch in started] == [False, False, False, True]  # step 4's, in flight: stopped
    (stop,) = lines[2]["recipe"]
    assert stop["key"] == "trainer.steps" and stop["value"] == 3 and "after 3 of trainer.steps=5" in stop["reason"]
    assert lines[0]["recipe"] == lines[1]["recipe"] == [] and [c.key for c in log.choices] == ["trainer.steps"]
    assert said[-1] == ("agentcore-rl train: training stopped after step 3 of 5 for the time budget "
                        "(recipe.time_budget_min), checkpoint step-00003 saved; the 4 rollouts of step 4 in flight "
                        "are stopped (never trained)")
    assert any(text.startswith("agentcore-rl recipe (step 3): trainer.steps = 3: training stopped early") for text
               in [c.line() for c in log.choices])
