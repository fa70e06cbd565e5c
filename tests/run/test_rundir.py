"""`run/rundir.py`: nothing on disk until the first rollout; resume keeps what was finished."""

import dataclasses
import json

import pytest
import yaml
from run_fakes import FAST

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import Rollout, Status, Usage
from agentcore_rl_harness.run.rundir import RunDir
from agentcore_rl_harness.run.staleness import next_launch


def _rollout(row_id, phase="eval", step=None, status=Status.COMPLETED):
    return Rollout(run_id="x", task="toy", row_id=row_id, sample_index=0, group_id="g", phase=phase, step=step,
                   session_id="s", status=status, error=None, reward=1.0, rewards={}, success=True, result={},
                   turns=1, usage=Usage(), elapsed_s=0.0, traces=())


def test_create_composes_but_writes_nothing_until_opened(tmp_path):
    rundir = RunDir.create(mode="eval", overrides=FAST, config_path=None, out_dir=tmp_path / "out", rootdir=tmp_path)
    assert not (tmp_path / "out").exists() and not rundir.opened
    assert rundir.config.typed.report.progress == "off"
    rundir.open()
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["report"]["progress"] == "off"
    assert json.loads((tmp_path / "out" / "run.json").read_text()) == {"mode": "eval", "overrides": FAST}
    rundir.store.append(_rollout("r0"))
    assert rundir.close() == [] and len((tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()) == 1


def test_the_default_directory_is_under_outputs(tmp_path):
    rundir = RunDir.create(mode="collect", overrides=FAST, config_path=None, out_dir=None, rootdir=tmp_path)
    assert rundir.path.parent == (tmp_path / "outputs").resolve() and rundir.path.name.endswith("-collect")


def _stopped_run(tmp_path, rollouts):
    rundir = RunDir.create(mode="run", overrides=FAST, config_path=None, out_dir=tmp_path / "run", rootdir=tmp_path)
    for rollout in rollouts:
        rundir.store.append(rollout)
    rundir.close()
    return tmp_path / "run"


def test_resume_keeps_finished_rollouts_and_redoes_steps_after_the_checkpoint(tmp_path):
    path = _stopped_run(tmp_path, [
        _rollout("r0", "pre"), _rollout("r1", "pre", status=Status.INFRA_ERROR),
        _rollout("r2", "train", step=1), _rollout("r3", "train", step=3),
    ])
    (path / "checkpoints" / "step-00002").mkdir(parents=True)
    (path / "train").mkdir()
    (path / "train" / "steps.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    rundir = RunDir.resume(mode="run", run_dir=path, overrides=[*FAST, "seed=3"])
    assert rundir.config.typed.seed == 3 and rundir.config.overrides == (*FAST, "seed=3")
    assert len(rundir.resumed) == 4
    reloaded = rundir.reload()
    assert [r.row_id for r in reloaded.rollouts] == ["r0", "r2"]  # infra errors retried, step 3 redone
    assert reloaded.start_step == 2 and reloaded.checkpoint.name == "step-00002"
    assert reloaded.train_steps == [{"step": 1}, {"step": 2}]  # steps 1-2 are in step-00002
    assert len((path / "rollouts.discarded.jsonl").read_text().splitlines()) == 2
    assert json.loads((path / "run.json").read_text())["overrides"] == [*FAST, "seed=3"]
    rundir.close()


def test_resume_refuses_what_is_not_a_run_or_another_mode(tmp_path):
    with pytest.raises(HarnessError, match="no config.yaml"):
        RunDir.resume(mode="eval", run_dir=tmp_path, overrides=[])
    path = _stopped_run(tmp_path, [_rollout("r0")])
    with pytest.raises(HarnessError, match="that is a 'run' run; resume it with --agentcore-rl run"):
        RunDir.resume(mode="eval", run_dir=path, overrides=[])


def test_an_attached_worker_reads_the_owners_directory_and_writes_nothing(tmp_path):
    owner = RunDir.resume(mode="run", run_dir=_stopped_run(tmp_path, [
        _rollout("r0", "pre"), _rollout("r1", "pre", status=Status.INFRA_ERROR)]), overrides=FAST)
    owner.reload()  # the controller sets the infra error aside before the workers start
    before = {p.name: p.read_bytes() for p in owner.path.iterdir()}
    worker = RunDir.attach(mode="run", run_dir=owner.path, resolved=owner.config.resolved,
                           overrides=list(owner.config.overrides), resumed=True)
    assert worker.config.typed == owner.config.typed and worker.config.overrides == owner.config.overrides
    assert [r.row_id for r in worker.reload().rollouts] == ["r0"]
    stored = worker.store.append(_rollout("r2").replace(reward=float("nan")))
    assert stored.status is Status.TASK_FAILED  # encoded as the owner would write it
    lines = worker.store.drain()
    assert [json.loads(line)["row_id"] for line in lines] == ["r2"] and worker.store.drain() == []
    assert worker.close() == []
    assert {p.name: p.read_bytes() for p in owner.path.iterdir()} == before


def test_resuming_async_partial_training_keeps_a_trained_partial_group_and_its_late_straggler(tmp_path):
    # step 1 (in checkpoint step-00001) trained group 1 without sample 2, which was recorded later;
    # step 2 (after the checkpoint) trained group 2; group 3 was never trained
    def member(launch, index):
        return dataclasses.replace(_rollout(f"r{launch}", "train", step=launch), sample_index=index,
                                   group_id=f"toy/r{launch}/train/{launch}")

    path = _stopped_run(tmp_path, [member(1, 0), member(1, 1), member(2, 0), member(2, 1), member(3, 0),
                                   member(1, 2)])
    (path / "checkpoints" / "step-00001").mkdir(parents=True)
    (path / "train").mkdir()
    lines = [{"step": 1, "groups_trained": ["toy/r1/train/1"], "rollouts_cut": ["toy/r1/train/1/2"]},
             {"step": 2, "groups_trained": ["toy/r2/train/2"], "rollouts_cut": []}]
    (path / "train" / "steps.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rundir = RunDir.resume(mode="run", run_dir=path, overrides=[*FAST, "trainer.mode=async",
                                                                  "algo.stragglers=partial"])
    reloaded = rundir.reload()
    assert [(r.step, r.sample_index) for r in reloaded.rollouts] == [(1, 0), (1, 1), (1, 2)]
    assert reloaded.start_step == 1 and reloaded.train_steps == lines[:1]
    assert len((path / "rollouts.discarded.jsonl").read_text().splitlines()) == 3  # groups 2 and 3
    assert next_launch(rundir.resumed) == 4  # new groups never join (or retrain) a recorded one
    rundir.close()
