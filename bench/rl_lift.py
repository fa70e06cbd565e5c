"""Reproduce the headline RL lift from scratch: `pytest --agentcore-rl run tasks` in a fresh run
directory with the shipped configs (SmolLM2-135M-Instruct, local runtime, in-process sampler,
embedded GRPO trainer), then print pre, post, delta, the paired p-value, wall time and peak RSS.

    HF_HUB_OFFLINE=1 python bench/rl_lift.py [--out DIR] [extra --agentcore-rl-set overrides]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. trainer.steps=8")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rl-lift-")) / "run"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--agentcore-rl",
               "run", "tasks", "--agentcore-rl-out", str(out)]
    for override in args.overrides:
        command += ["--agentcore-rl-set", override]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started = time.monotonic()
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    peak_rss_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    report_path = out / "report.json"
    if completed.returncode != 0 or not report_path.is_file():
        print(completed.stdout[-4000:], completed.stderr[-4000:], sep="\n")
        print(f"run failed with exit code {completed.returncode}")
        return 1
    report = json.loads(report_path.read_text())
    delta = report["delta"]["overall"]
    steps = [s["reward_mean"] for s in report.get("train") or []]
    print(f"run directory   {out}")
    print(f"pre success     {delta['pre']:.3f}  ({delta['pairs']} paired rollouts)")
    print(f"post success    {delta['post']:.3f}")
    print(f"delta           {100 * delta['delta']:+.1f} pp  ({delta['improved']} improved, "
          f"{delta['regressed']} regressed)")
    print(f"McNemar p       {delta['p_value']:.2g}")
    print(f"reward / step   {', '.join(f'{r:.2f}' for r in steps if r is not None)}")
    print(f"wall time       {wall / 60:.1f} min")
    print(f"peak RSS        {peak_rss_gb:.2f} GB (largest process: the pytest/trainer process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
