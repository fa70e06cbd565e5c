"""docs/tutorial.md runs as written: its files are created and its commands run, in order, in a
fresh folder with the `tiny` model and no network (HF_HUB_OFFLINE=1), as a reader would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_blocks import DOCS, blocks, page_script

pytestmark = pytest.mark.slow

REPO = DOCS.parent
TUTORIAL = DOCS / "tutorial.md"


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


def test_the_tutorial_blocks_are_what_the_test_runs():
    """What is run is what the page shows: files, commands, and the one skipped set-up block."""
    page = blocks(TUTORIAL)
    assert {b.title for b in page if b.title} == {"agent.py", "data/shop.jsonl", "test_shop.py",
                                                   "configs/config.yaml"}
    skipped = [b for b in page if b.skipped]
    assert len(skipped) == 1 and "scripts/setup main" in skipped[0].text
    commands = "".join(b.text for b in page if b.runs)
    for command in ("agent=oracle", "agent=null", "pytest --agentcore-rl run", "report compare"):
        assert command in commands


def test_the_tutorial_runs_as_written(tmp_path, tiny_model_dir):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", page_script(TUTORIAL)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1500)
    output = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, output
    print(f"tutorial ran in {time.monotonic() - started:.0f} s")
    runs = tmp_path / "shop" / "runs"

    oracle = json.loads((runs / "oracle" / "report.json").read_text())
    assert oracle["overall"]["success_rate"]["value"] == 1.0  # the gate held it too
    null = json.loads((runs / "null" / "report.json").read_text())
    assert null["overall"]["success_rate"]["value"] == 0.0
    assert null["overall"]["mean_reward"]["value"] == 0.0

    trained = runs / "trained"
    phases = {}
    for record in _records(trained):
        phases[record["phase"]] = phases.get(record["phase"], 0) + 1
    assert phases == {"pre": 8, "demo": 6, "train": 16, "post": 8}, phases
    warmup = json.loads((trained / "train" / "warmup.json").read_text())
    assert warmup["loss_after"] < warmup["loss_before"]
    steps = [json.loads(line) for line in (trained / "train" / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    assert sum(step["trained_tokens"] for step in steps) > 0, steps  # RL trained, not only the warm-up
    report = json.loads((trained / "report.json").read_text())
    assert report["delta"]["overall"]["pairs"] == 8
    assert (trained / "checkpoints" / "step-00002").is_dir()
    assert "Before and after training" in done.stdout  # `cat report.md` printed the paired table
    assert (runs / "oracle" / "compare.md").is_file()  # `report compare` wrote into B's directory
