"""`run/training.py`: rows -> groups -> trainer steps, steps.jsonl, checkpoints, resume order."""

import asyncio
import json

from run_fakes import RecordingTrainer, make_spec, said_four

from agentcore_rl_harness.records import SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Episode
from agentcore_rl_harness.run.scoring import Scorer
from agentcore_rl_harness.run.training import TrainingLoop, TrainPlan


def _loop(tmp_path, trainer, *, steps=3, start_step=0, statuses=None, lines=None):
    spec = make_spec(tmp_path, samples=2, rewards=[said_four], train=3, test=0)
    scorer = Scorer(run_id="run", call=lambda f, *a, **k: f(*a, **k), fixtures=dict)
    batches = []
    counter = iter(range(10**6))

    def run_cases(cases):
        batches.append(cases)
        return [Episode(case=case, session_id=f"arl-{i}", turns=1, usage=Usage(), traces=(),
                        outcome=SessionOutcome((statuses or {}).get(i, Status.COMPLETED),
                                               {"reply": "4" if next(counter) % 2 else "5"}, None, 0.0))
                for i, case in enumerate(cases)]

    loop = TrainingLoop(plan=TrainPlan(steps=steps, batch_rows=2, group_size=None, checkpoint_every=2, seed=1),
                        specs=[spec], run_cases=run_cases, score=scorer.score, trainer=trainer,
                        run_dir=tmp_path / "run", write=(lines if lines is not None else []).append,
                        start_step=start_step)
    return loop, batches


def test_each_step_rolls_out_groups_trains_and_logs_one_line(tmp_path):
    trainer, said = RecordingTrainer(), []
    loop, batches = _loop(tmp_path, trainer, lines=said)
    lines = loop.run(lambda groups: asyncio.run(trainer.step(groups=groups)))
    assert [len(b) for b in batches] == [4, 4, 4]  # 2 rows x the task's 2 samples
    assert {c.phase for b in batches for c in b} == {"train"} and [b[0].step for b in batches] == [0, 1, 2]
    # one group per row drawn (a row drawn twice in a step, across an epoch's end, is one group)
    assert [sum(len(g.samples) for g in groups) for groups in trainer.steps] == [4, 4, 4]
    assert [line["step"] for line in lines] == [0, 1, 2] and lines[0]["success_rate"] == 0.5
    written = [json.loads(x) for x in (tmp_path / "run" / "train" / "steps.jsonl").read_text().splitlines()]
    assert written == lines and lines[0]["loss"] == 0.5 and set(lines[0]["wall_time_s"]) == {"rollout", "train", "total"}
    assert [p.name for p in trainer.saved] == ["step-00002", "step-00003"]  # every 2, and the last
    assert said[0].startswith("agentcore-rl train step 1/3: ") and "success 0.500" in said[0]


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
    assert len(resumed_batches) == 1 and resumed_batches[0][0].step == 2
    assert [c.row_id for c in resumed_batches[0]] == [c.row_id for c in whole_batches[2]]
