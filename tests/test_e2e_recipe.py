"""End to end: the honest controls under the default `recipe=auto`. A null agent and a spam agent
(`sanity_agents/`) on the bundled arithmetic task with the tiny model: the recipe probes their
~0 base success, warms up from the oracle (train rows only) and trains, and they still score 0
in every phase: the recipe gives them nothing to game."""

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# isolation=none: sessions fork from a zygote that imported the agent once (~35 ms, not a fresh
# interpreter each); neither sanity agent runs code the model writes
SMALL = ["model=tiny", "eval.max_rows=1", "eval.samples=1", "trainer.steps=1", "trainer.batch_rows=1",
         "algo.group_size=2", "warmup.max_demonstrations=2", "recipe.probe_rows=2", "recipe.warmup_chunk_steps=1",
         "recipe.warmup_max_steps=1", "runtime.isolation=none", "report.progress=off"]


@pytest.fixture
def bundled(pytester):
    for name in ("tasks", "agents", "configs"):
        shutil.copytree(REPO / name, pytester.path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return pytester


@pytest.mark.parametrize("agent", ["null", "spam"])
def test_null_and_spam_agents_score_zero_under_the_adaptive_default(bundled, tiny_model_dir, agent):
    args = [arg for override in (*SMALL, f"agent={agent}") for arg in ("--agentcore-rl-set", override)]
    result = bundled.runpytest_subprocess("--agentcore-rl", "run", *args, "--agentcore-rl-out", "run", "tasks",
                                          timeout=900)
    assert result.ret == 0, result.stdout.str()[-4000:]  # failed tasks do not fail the run
    run = bundled.path / "run"
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    scored = [r for r in records if r["phase"] in ("pre", "probe", "warmup", "train", "post")]
    assert {r["phase"] for r in scored} == {"pre", "probe", "warmup", "train", "post"}
    assert not any(r["success"] or r["reward"] for r in scored)  # nothing gamed, in any phase
    rows = [json.loads(line) for line in (bundled.path / "tasks/data/arith.jsonl").read_text().splitlines()]
    test_rows = {row["id"] for row in rows if row["split"] == "test"}
    demos = json.loads((run / "train" / "warmup.json").read_text())["demonstrations"]
    assert demos and not test_rows & {d["row_id"] for d in demos}  # the oracle's, from train rows only
    recipe = json.loads((run / "recipe.json").read_text())
    (warmup,) = [c for c in recipe["choices"] if c["key"] == "warmup"]
    assert warmup["applied"] and warmup["value"]["probe_success"] == [0.0, 0.0]
    report = json.loads((run / "report.json").read_text())
    assert report["pre"]["overall"]["success_rate"]["value"] == 0.0
    assert report["post"]["overall"]["success_rate"]["value"] == 0.0
    result.stdout.fnmatch_lines(["*agentcore-rl recipe (warm-up): warmup = *"])
