"""bench/vllm_main_job.py's measurements: each arm's CPU time and peak RSS are its own process
tree's, not every child the script ran before it (the first version read RUSAGE_CHILDREN, whose
peak is the largest child ever: the second arm reported the first arm's peak)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("vllm_main_job", ROOT / "bench" / "vllm_main_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _holding(mb: int, seconds: float = 0.0) -> list[str]:
    """A real child that touches `mb` MB, then sleeps."""
    return [sys.executable, "-c", f"import time; b = bytearray({mb} << 20); time.sleep({seconds})"]


def test_each_arm_measures_its_own_tree_only(tmp_path):
    # measured from a lean parent, as the bench is: a child's ru_maxrss starts at its parent's RSS
    # (the image it forked from, before its exec), and this pytest process holds torch
    script = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import vllm_main_job as b; "
              "from pathlib import Path; out = Path(sys.argv[1]); "
              f"print(json.dumps([b.measure({_holding(300)!r}, out / 'big.log'), "
              f"b.measure({_holding(1)!r}, out / 'small.log'), "
              "b.measure([sys.executable, '-c', 'import sys; print(\\'boom\\'); sys.exit(3)'], out / 'f.log')]))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, check=True)
    big, small, failed = json.loads(done.stdout)
    assert big["rc"] == small["rc"] == 0
    assert big["peak_rss_mb"] >= 300
    assert small["peak_rss_mb"] < 100  # its own peak, not the big one before it
    assert failed["rc"] == 3 and (tmp_path / "f.log").read_text() == "boom\n"


def test_the_tree_rss_counts_grandchildren(tmp_path):
    bench = _bench()
    # a child whose own child holds the memory, as the harness holds the vLLM engine
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                               *_holding(200, 30)])
    try:
        deadline = time.monotonic() + 20
        while bench.tree_rss_kb(parent.pid) < 200 << 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert bench.tree_rss_kb(parent.pid) >= 200 << 10
    finally:
        parent.kill()
        parent.wait()
    assert bench.tree_rss_kb(parent.pid) == 0  # gone: nothing


def test_steps_give_the_sync_and_train_time_per_step(tmp_path):
    bench = _bench()
    steps = tmp_path / "steps.jsonl"
    lines = [{"reward_mean": 0.25, "sync_s": 0.5, "wall_time_s": {"train": 30.0}},
             {"reward_mean": None, "sync_s": None, "wall_time_s": {"train": 2.0}},
             {"reward_mean": 0.75, "sync_s": 1.5, "wall_time_s": {"train": 40.0}}]
    steps.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert bench.summarize_steps(steps) == {
        "steps": 3, "reward_per_step": [0.25, None, 0.75], "sync_s_per_step": 1.0, "sync_s": [0.5, 1.5],
        "train_s_per_step": 24.0}
    assert bench.summarize_steps(tmp_path / "none.jsonl") == {"steps": 0}
