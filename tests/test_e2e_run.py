"""End to end: `pytest --agentcore-rl run` and `train` on a toy task with the tiny model."""

import json

import pytest
from toy_project import even_length_task, rows, write_project

pytestmark = pytest.mark.slow




@pytest.fixture
def toy(pytester):
    write_project(pytester.path, task=even_length_task(samples=3), dataset=rows(6, train=4))
    return pytester


def _run(pytester, mode, *extra):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", mode, "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=6", "--agentcore-rl-set", "trainer.steps=2",
        "--agentcore-rl-set", "trainer.batch_rows=2", "--agentcore-rl-set", "trainer.lr=1e-2",
        "--agentcore-rl-set", "trainer.checkpoint_every=1", "--agentcore-rl-out", "run", *extra,
        timeout=900,
    )


def test_run_mode_pre_train_post(toy, tiny_model_dir):
    result = _run(toy, "run")
    assert result.ret == 0, result.stdout.str()[-4000:]
    run = toy.path / "run"
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    by_phase = {}
    for record in records:
        by_phase.setdefault(record["phase"], []).append(record)
    assert len(by_phase["pre"]) == len(by_phase["post"]) == 2 * 3  # 2 test rows x 3 samples
    assert len(by_phase["train"]) == 2 * 2 * 3  # 2 steps x 2 rows x 3 samples
    assert {r["step"] for r in by_phase["train"]} == {1, 2}  # steps count from 1 everywhere
    versions = {r["step"]: r["traces"][0]["metadata"]["policy_versions"] for r in by_phase["train"]}
    assert versions[1] == [0] and versions[2] == [1]  # step 2 sampled from the updated policy
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [2] for r in by_phase["post"])
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert step["rollouts"] == 6 and "loss" in step and step["wall_time_s"]["total"] > 0
        # the swap into the in-process sampler, timed (None: a step that trained nothing synced nothing)
        if step["trained_tokens"]:
            assert 0 < step["sync_s"] < step["wall_time_s"]["train"]
        else:
            assert step["sync_s"] is None
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00001", "step-00002"]
    report = json.loads((run / "report.json").read_text())
    assert report["delta"]["overall"]["pairs"] == 6
    assert 0.0 <= report["delta"]["overall"]["p_value"] <= 1.0
    assert [s["step"] for s in report["train"]] == [1, 2]
    assert report["overall"]["rollouts"] == 6  # the items are the post-eval
    markdown = (run / "report.md").read_text()
    assert "Before and after training" in markdown and "Training reward per step" in markdown
    assert "| tokens trained | weight sync s |" in markdown
    assert all(f"| {s['sync_s']:.3f} |" in markdown for s in steps if s["sync_s"] is not None)
    result.stdout.fnmatch_lines(["*agentcore-rl pre -> post:*McNemar p=*"])


def test_overlapped_rollouts_train_one_step_off_policy_at_most(toy, tiny_model_dir):
    """trainer.overlap_rollouts=true through the real gateway, sampler and trainer: step k's
    turns (k from 1) were sampled under policy k-2 or k-1, never older; the post-eval sees the last policy."""
    result = _run(toy, "run", "--agentcore-rl-set", "trainer.overlap_rollouts=true",
                  "--agentcore-rl-set", "trainer.steps=3")
    assert result.ret == 0, result.stdout.str()[-4000:]
    run = toy.path / "run"
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    train = [r for r in records if r["phase"] == "train"]
    assert sorted({r["step"] for r in train}) == [1, 2, 3] and len(train) == 3 * 2 * 3
    for record in train:
        versions = set(record["traces"][0]["metadata"]["policy_versions"])
        assert versions <= {max(record["step"] - 2, 0), record["step"] - 1}, (record["step"], versions)
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [3] for r in records if r["phase"] == "post")
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["staleness_max"] is None or s["staleness_max"] <= 1 for s in steps)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00001", "step-00002", "step-00003"]


def test_train_mode_has_one_item_per_task(toy, tiny_model_dir):
    result = _run(toy, "train")
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.assert_outcomes(passed=1)
    run = toy.path / "run"
    assert len((run / "train" / "steps.jsonl").read_text().splitlines()) == 2
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in records} == {"train"}


def test_killed_run_resumes_from_its_last_checkpoint(toy, tiny_model_dir):
    import signal
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "run",
            "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "sampling.max_tokens=6",
            "--agentcore-rl-set", "trainer.steps=3", "--agentcore-rl-set", "trainer.batch_rows=2",
            "--agentcore-rl-set", "trainer.checkpoint_every=1"]
    run = toy.path / "run"
    process = subprocess.Popen([*args, "--agentcore-rl-out", "run"], cwd=toy.path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (run / "checkpoints" / "step-00001").is_dir():
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (run / "checkpoints" / "step-00001").is_dir()
    before = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    pre_sessions = {r["session_id"] for r in before if r["phase"] == "pre"}
    assert len(pre_sessions) == 6

    resumed = subprocess.run([*args, "--agentcore-rl-resume", "run"], cwd=toy.path,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "training continues at step" in resumed.stdout
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert {r["session_id"] for r in records if r["phase"] == "pre"} == pre_sessions  # kept
    train_steps = sorted({r["step"] for r in records if r["phase"] == "train"})
    assert train_steps == [1, 2, 3]
    assert sum(1 for r in records if r["phase"] == "train") == 3 * 2 * 3  # no duplicates
    steps = [json.loads(line)["step"] for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    report = json.loads((run / "report.json").read_text())
    assert report["delta"]["overall"]["pairs"] == 6 and len(report["train"]) == 3


def test_resume_with_the_wrong_mode_is_a_usage_error(toy, tiny_model_dir):
    result = _run(toy, "eval", "--agentcore-rl-set", "eval.samples=1")
    assert result.ret == 0
    again = toy.runpytest_subprocess("--agentcore-rl", "run", "--agentcore-rl-resume", "run")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(["*that is a 'eval' run; resume it with --agentcore-rl eval*"])
