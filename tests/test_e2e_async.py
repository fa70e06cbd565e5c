"""End to end: `pytest --agentcore-rl run` with `trainer.mode=async` through the real plugin,
gateway, sampler, local runtime and trainer (tiny model), SIGKILLed after its first checkpoint
and resumed: every step's samples within the staleness bound, no rollout trained twice."""

import json
import signal
import subprocess
import sys
import time

import pytest
from toy_project import even_length_task, kill_group, rows, write_project

pytestmark = pytest.mark.slow

SETTINGS = ["model=tiny", "sampling.max_tokens=6", "trainer.mode=async", "algo.max_staleness=1",
            "trainer.steps=4", "trainer.batch_rows=2", "trainer.checkpoint_every=1", "trainer.lr=1e-2",
            "runtime.concurrency=4", "report.progress=lines"]


def _command(*extra):
    sets = [arg for setting in SETTINGS for arg in ("--agentcore-rl-set", setting)]
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "run", *sets, *extra]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_async_run_is_killed_resumed_and_trains_each_rollout_at_most_once(tmp_path, tiny_model_dir):
    # r0 sleeps 2 s before its turn: a straggler the first steps do not wait for
    data = [dict(row, sleep=2.0 if row["id"] == "r0" else 0) for row in rows(8, train=6)]
    write_project(tmp_path, task=even_length_task(samples=3), dataset=data)
    run = tmp_path / "run"
    process = subprocess.Popen(_command("--agentcore-rl-out", "run"), cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (run / "checkpoints" / "step-00001").is_dir():
            assert process.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        kill_group(process)
    assert (run / "checkpoints" / "step-00001").is_dir() and not (run / "report.json").exists()

    resumed = subprocess.run([*_command(), "--agentcore-rl-resume", "run"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-2000:]
    assert "training continues at step" in resumed.stdout and "done (async" in resumed.stdout

    steps = _lines(run / "train" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    trained = [group for s in steps for group in s["groups_trained"]]
    assert len(trained) == len(set(trained)) == 4 * 2  # no group trained twice, across the kill
    records = [r for r in _lines(run / "rollouts.jsonl") if r["phase"] == "train"]
    keys = [(r["group_id"], r["sample_index"]) for r in records]
    assert len(keys) == len(set(keys))  # each rollout recorded once
    for group in trained:  # a trained group was whole, and its rollouts are in the run directory
        assert sorted(i for g, i in keys if g == group) == [0, 1, 2]
    for s in steps:
        assert all(int(lag) <= 1 for lag in s["async"]["staleness"]) and s["async"]["dropped_stale"] == 0
    by_group = {(r["group_id"]): r for r in records}
    for s in steps:  # each step's samples were sampled under versions within one of the trainer's
        for group in s["groups_trained"]:
            versions = by_group[group]["traces"][0]["metadata"]["policy_versions"]
            assert s["async"]["version_trained"] - min(versions) <= 1
    last = steps[-1]["policy_version"]  # the post-eval samples with the last policy
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [last] for r in _lines(run / "rollouts.jsonl")
               if r["phase"] == "post")
    report = json.loads((run / "report.json").read_text())
    assert [s["step"] for s in report["train"]] == [1, 2, 3, 4] and report["training"]["dropped_stale"] == 0
    assert all(s["staleness"] is not None for s in report["train"])
    assert "Async training: 0 samples dropped as stale" in (run / "report.md").read_text()
