"""`run/recipe.py`: recipe=auto inside whole runs over the fakes (ScriptedSampler, FakeRuntime, a
recording trainer): the automatic warm-up triggers on a task with ~0 base success and an oracle,
and stops once the train-row probe passes its threshold; it does not trigger where the base
success is high; a larger group follows steps whose groups all failed; probes and demonstrations
never touch evaluation rows; every choice is in recipe.json, steps.jsonl and the report."""

import json

import pytest

import agentcore_rl_harness as arl
from run_driver import drive_items
from run_fakes import FAST, RecordingTrainer, said_four, write_rows
from terminal_lines import Lines

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.run.plan import TrainItem
from agentcore_rl_harness.run.recipe import probe_rows, start_up
from agentcore_rl_harness.tasks import task_spec

TRAIN = ["trainer.steps=2", "trainer.batch_rows=2", "trainer.checkpoint_every=2"]


def spec_with_oracle(tmp_path, *, oracle=True, train=6, test=2):
    tmp_path.mkdir(exist_ok=True)
    dataset = write_rows(tmp_path / "toy.jsonl", test=test, train=train)

    def test_toy(rollout, row):
        assert rollout.reward == 1.0

    script = (lambda row: {"_script": [{"content": "4"}]}) if oracle else None
    return task_spec(arl.task(dataset=str(dataset), samples=2, rewards=[said_four], name="toy",
                              oracle=script)(test_toy))


def run_of(tmp_path, build_harness, replies, *overrides, trainer=None):
    trainer = trainer or RecordingTrainer()
    terminal = Lines()
    harness = build_harness(*TRAIN, *overrides, trainer=trainer, replies=replies)
    run = Run.made(RunOptions(mode="run", overrides=(*FAST, *TRAIN, *overrides), rootdir=tmp_path,
                              out=tmp_path / "out"), terminal=terminal, harness=harness)
    return run, trainer, terminal


def drive(run, spec):
    items = [(f"{spec.name}::{index}", item) for index, item in enumerate(run.plan(spec))]
    drive_items(run, items, lambda item_id, item: {} if isinstance(item, TrainItem) else {
        "rollout": run.rollout_for(item_id), "row": dict(item.row)})
    assert not run.finish()
    records = [json.loads(line) for line in (run.run_dir / "rollouts.jsonl").read_text().splitlines()]
    return records, json.loads((run.run_dir / "recipe.json").read_text())


def test_zero_base_success_with_an_oracle_warms_up_until_the_probe_passes(tmp_path, build_harness):
    trainer = RecordingTrainer()
    # The policy answers right once 8 supervised steps ran: 0% on the first two probes, then 100%.
    replies = lambda prompt, params: "4" if len(trainer.sft_batches) >= 8 else "5"  # noqa: E731
    run, trainer, terminal = run_of(tmp_path, build_harness, replies, "recipe.probe_rows=3", trainer=trainer)
    spec = spec_with_oracle(tmp_path)
    records, recipe = drive(run, spec)
    assert len(trainer.sft_batches) == 8  # two chunks of recipe.warmup_chunk_steps=4, then it stopped
    assert len(trainer.sft_losses) == 3  # before, after chunk 1 (= before chunk 2), after chunk 2
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert warmup["applied"] and warmup["value"] == {"steps": 8, "probe_success": [0.0, 0.0, 1.0]}
    assert "reached recipe.warmup_threshold=0.5" in warmup["reason"]
    probes = [r for r in records if r["phase"] == "probe"]
    assert len(probes) == 9 and {r["step"] for r in probes} == {0, 4, 8}
    held_out = {"r6", "r7"}  # the test rows: never probed, never demonstrated
    assert not held_out & {r["row_id"] for r in records if r["phase"] in ("probe", "demo")}
    demonstrated = json.loads((run.run_dir / "train" / "warmup.json").read_text())["demonstrations"]
    assert demonstrated and not held_out & {d["row_id"] for d in demonstrated}
    assert {r["phase"] for r in records} >= {"pre", "demo", "warmup", "train", "post"}
    assert any(line.startswith("agentcore-rl recipe (warm-up): warmup = ") for line in terminal.lines)
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["recipe"]["choices"] == recipe["choices"] and report["rl_delta"] is not None
    assert "## Recipe (recipe=auto)" in (run.run_dir / "report.md").read_text()


def test_high_base_success_or_no_oracle_means_no_warm_up(tmp_path, build_harness):
    run, trainer, _ = run_of(tmp_path / "a", build_harness, lambda prompt, params: "4")
    records, recipe = drive(run, spec_with_oracle(tmp_path / "a"))
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert not warmup["value"] and "base success 100%" in warmup["reason"] and not trainer.sft_batches
    assert [r["step"] for r in records if r["phase"] == "probe"] == [0] * 6  # every train row, one probe
    run, trainer, _ = run_of(tmp_path / "b", build_harness, lambda prompt, params: "5")
    records, recipe = drive(run, spec_with_oracle(tmp_path / "b", oracle=False))
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert not warmup["applied"] and "no oracle" in warmup["reason"] and not trainer.sft_batches
    assert not [r for r in records if r["phase"] == "probe"]  # nothing to decide: no probe ran


def test_an_explicit_warm_up_setting_wins(tmp_path, build_harness):
    run, trainer, _ = run_of(tmp_path, build_harness, lambda prompt, params: "5", "warmup.enabled=false")
    _, recipe = drive(run, spec_with_oracle(tmp_path))
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert not warmup["applied"] and warmup["reason"] == "warmup.enabled=false set explicitly"
    assert not trainer.sft_batches


def test_steps_whose_groups_all_failed_raise_the_group_size(tmp_path, build_harness):
    run, trainer, _ = run_of(tmp_path, build_harness, lambda prompt, params: "5")
    records, recipe = drive(run, spec_with_oracle(tmp_path, oracle=False))
    train = [r for r in records if r["phase"] == "train"]
    assert [sum(r["step"] == step for r in train) for step in (1, 2)] == [4, 8]  # 2 rows x 2, then x 4
    (raised,) = [c for c in recipe["choices"] if c["key"] == "algo.group_size"]
    assert raised["applied"] and raised["value"] == 4 and raised["at"] == "step 1"
    steps = [json.loads(line) for line in (run.run_dir / "train" / "steps.jsonl").read_text().splitlines()]
    assert steps[0]["recipe"] == [raised] and steps[1]["recipe"] == []
    assert all("kl_initial" in line and "informative_fraction" in line and "reward_spread" in line for line in steps)
    assert "algo.group_size=4" in (run.run_dir / "report.md").read_text()


def test_informative_groups_or_an_explicit_group_size_keep_the_group(tmp_path, build_harness):
    counter = iter(range(10**6))
    alternate = lambda prompt, params: "4" if next(counter) % 2 == 0 else "5"  # noqa: E731
    run, _, _ = run_of(tmp_path / "a", build_harness, alternate)
    records, recipe = drive(run, spec_with_oracle(tmp_path / "a", oracle=False))
    assert sum(r["phase"] == "train" for r in records) == 8
    assert not [c for c in recipe["choices"] if c["key"] == "algo.group_size"]
    run, _, _ = run_of(tmp_path / "b", build_harness, lambda prompt, params: "5", "algo.group_size=2")
    records, recipe = drive(run, spec_with_oracle(tmp_path / "b", oracle=False))
    assert sum(r["phase"] == "train" for r in records) == 8
    (kept,) = [c for c in recipe["choices"] if c["key"] == "algo.group_size"]
    assert not kept["applied"] and "would choose 4" in kept["reason"]


def test_recipe_none_chooses_nothing(tmp_path, build_harness):
    run, trainer, terminal = run_of(tmp_path, build_harness, lambda prompt, params: "5", "recipe=none")
    spec = spec_with_oracle(tmp_path)
    items = [(f"toy::{index}", item) for index, item in enumerate(run.plan(spec))]
    drive_items(run, items, lambda item_id, item: {} if isinstance(item, TrainItem) else {
        "rollout": run.rollout_for(item_id), "row": dict(item.row)})
    run.finish()
    assert not (run.run_dir / "recipe.json").exists() and not trainer.sft_batches
    assert not any("agentcore-rl recipe" in line for line in terminal.lines)
    assert json.loads((run.run_dir / "report.json").read_text())["recipe"] is None


def test_probe_rows_are_train_rows_only(tmp_path):
    spec = spec_with_oracle(tmp_path, train=3, test=4)
    rows = probe_rows([spec], "test", 10, seed=0)
    assert sorted(row["id"] for _, row in rows) == ["r0", "r1", "r2"]


def test_start_up_choices_change_the_config_before_the_harness_is_built(tmp_path, tiny_model_dir):
    spec = spec_with_oracle(tmp_path)
    spec_script = (lambda row: {"_script": [{"content": "The answer is 4."}, {"tool_calls": [
        {"name": "calculator", "arguments": {"expression": "2 + 2"}}]}]})
    spec = task_spec(arl.task(dataset=spec.dataset, samples=2, name="toy", oracle=spec_script)(lambda rollout, row: None))
    terminal = Lines()
    run = Run.made(RunOptions(mode="run", overrides=(*FAST, "model=tiny", "trainer.lora_rank=4"), rootdir=tmp_path,
                              out=tmp_path / "out"), terminal=terminal)
    log, config = start_up(run.config, [spec], write=run.write, harness_built=False)
    typed = config.typed
    choices = {c.key: c for c in log.choices}
    longest = int(choices["sampling.max_tokens"].reason.split("longest turn is ")[1].split()[0])
    assert 10 < longest < 40 and typed.sampling.max_tokens == choices["sampling.max_tokens"].value >= longest * 1.5
    assert typed.trainer.trainer.lr == 3e-4 and config.resolved["trainer"]["lr"] == 3e-4
    assert typed.trainer.trainer.lora_rank == 4 and not choices["trainer.lora_rank"].applied  # explicit
    assert typed.trainer.trainer.autocast_dtype is None  # a 95K-parameter model: float32, unmeasured
    assert any(line.startswith("agentcore-rl recipe (start-up): sampling.max_tokens = ") for line in terminal.lines)
    assert run.config.typed.trainer.trainer.lr != 3e-4  # the run applies the choices itself, when it starts
    run.rundir.reconfigure(config)
    assert run.config is config
    run.rundir.open()
    with pytest.raises(HarnessError, match="cannot change: its config.yaml is written"):
        run.rundir.reconfigure(config)
    with pytest.raises(AttributeError, match="Run.rundir is set once"):
        run.rundir = run.rundir  # nothing outside the run writes its fields
