"""End to end: `pytest --agentcore-rl run` with the supervised warm-up on the bundled arithmetic
task and the tiny model: teacher-forced oracle demonstrations from train rows, supervised steps
that lower their loss, then GRPO; report.json pairs pre -> after the warm-up -> after RL."""

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SMALL = ["model=tiny", "eval.max_rows=2", "eval.samples=1", "trainer.steps=1", "trainer.batch_rows=1",
         "algo.group_size=2", "trainer.finetune=full", "warmup.enabled=true", "warmup.steps=3",
         "warmup.batch_size=4", "warmup.max_demonstrations=4", "warmup.lr=1e-2", "report.progress=off"]


@pytest.fixture
def bundled(pytester):
    for name in ("tasks", "agents", "configs"):
        shutil.copytree(REPO / name, pytester.path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return pytester


def _run(pytester, *overrides, out="run"):
    args = [arg for override in (*SMALL, *overrides) for arg in ("--agentcore-rl-set", override)]
    return pytester.runpytest_subprocess("--agentcore-rl", "run", *args, "--agentcore-rl-out", out, "tasks",
                                         timeout=900)


def test_run_with_an_oracle_warm_up_reports_three_paired_phases(bundled, tiny_model_dir):
    result = _run(bundled)
    assert result.ret == 0, result.stdout.str()[-4000:]
    run = bundled.path / "run"
    rows = [json.loads(line) for line in (bundled.path / "tasks/data/arith.jsonl").read_text().splitlines()]
    train_rows = {row["id"] for row in rows if row["split"] == "train"}
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    phases = {}
    for record in records:
        phases.setdefault(record["phase"], []).append(record)
    assert {phase: len(items) for phase, items in phases.items()} == {
        "pre": 2, "demo": 4, "warmup": 2, "train": 2, "post": 2}
    for demo in phases["demo"]:  # the teacher-forced oracle episodes: train rows, all successful
        assert demo["row_id"] in train_rows and demo["success"]
        assert demo["traces"][0]["metadata"]["teacher_forced"]
        assert demo["traces"][0]["metadata"]["forced_logprobs"] == "zero"  # not scored: SFT needs no logprobs

    warmup = json.loads((run / "train" / "warmup.json").read_text())
    assert warmup["source"] == "oracle" and warmup["steps"] == 3
    assert warmup["loss_after"] < warmup["loss_before"]
    assert {d["row_id"] for d in warmup["demonstrations"]} == {d["row_id"] for d in phases["demo"]}
    assert all(d["row_id"] in train_rows for d in warmup["demonstrations"])  # never a test row
    # The warm-up's 3 supervised steps moved the policy; RL's step sampled from it.
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [3] for r in phases["warmup"])
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [3] for r in phases["train"])

    report = json.loads((run / "report.json").read_text())
    assert report["pre"]["overall"]["rollouts"] == report["warmup"]["overall"]["rollouts"] == 2
    assert report["post"]["overall"]["rollouts"] == 2
    for key in ("delta", "warmup_delta", "rl_delta"):
        assert report[key]["overall"]["pairs"] == 2
    markdown = (run / "report.md").read_text()
    assert "Before and after the supervised warm-up" in markdown and "RL's own lift" in markdown
    result.stdout.fnmatch_lines(["*agentcore-rl warm-up: 3 supervised steps on 4 demonstrations from train rows*"])


def test_a_warm_up_from_a_run_of_test_rows_trains_on_nothing_and_says_why(bundled, tiny_model_dir):
    # An oracle eval of the test rows: every rollout succeeds, but none is a train row.
    evaluated = bundled.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=oracle",
        "--agentcore-rl-set", "eval.max_rows=2", "--agentcore-rl-set", "eval.samples=1",
        "--agentcore-rl-out", "oracle-eval", "tasks", timeout=600)
    assert evaluated.ret == 0
    result = _run(bundled, f"warmup.source=run:{bundled.path / 'oracle-eval'}", out="from-test-rows")
    assert result.ret != 0  # the run failed: no demonstrations is an error, not a silent RL-only run
    result.stdout.fnmatch_lines(["*no demonstrations from train rows (left out: {'evaluation_row': 2})*"])
    assert not (bundled.path / "from-test-rows" / "train" / "warmup.jsonl").exists()
