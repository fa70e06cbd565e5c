"""What the experiment trackers cost a run: per trainer step, and once per run.

Per step: `Tracking.step` of one steps.jsonl-sized line (25 numbers) with each tracker, against
what the training loop does anyway for that step (json.dumps + append to train/steps.jsonl,
measured in the same run). Once per run: opening the tracker (import included, in a fresh
process per tracker so imports are not shared), logging the config, the summary, the report
files and finishing. Offline: W&B offline, MLflow on a file store, TensorBoard event files.

Run: python bench/trackers.py [--steps 200] [--trackers tensorboard wandb mlflow]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def step_line(step: int) -> dict:
    line = {"step": step, "rollouts": 32, "excluded": {"timeout": 0, "agent_error": 1, "infra_error": 0},
            "groups": 4, "reward_mean": 0.4 + step * 1e-3, "reward_std": 0.3, "success_rate": 0.5}
    line.update({name: 0.1 * step for name in ("loss", "kl", "sampler_kl", "clip_fraction", "grad_norm",
                                               "advantage_abs_mean", "staleness_mean", "lr")})
    line.update({"trained_tokens": 2048, "sequences": 32, "groups_skipped": 0, "policy_version": step + 1,
                 "staleness_max": 0, "wall_time_s": {"rollout": 12.5, "train": 5.7, "total": 18.2}})
    return line


def child(name: str, steps: int) -> dict:
    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.run.tracking import Tracking

    work = Path(tempfile.mkdtemp(prefix="bench-trackers-"))
    run_dir = work / "run"
    (run_dir / "train").mkdir(parents=True)
    for report in ("report.json", "report.md", "report.html", "junit.xml"):
        (run_dir / report).write_text("x" * 20000)
    lines = [step_line(step) for step in range(steps)]
    started = time.perf_counter()
    for line in lines:  # the baseline: what the loop writes per step anyway
        with open(run_dir / "train" / "steps.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
    baseline = (time.perf_counter() - started) / steps
    result = {"tracker": name, "baseline_step_s": baseline}
    if name == "none":
        return result
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    composed = compose_config([f"logger={name}"])
    warnings: list[str] = []
    started = time.perf_counter()
    tracking = Tracking.start(composed.typed.logger, run_dir=run_dir, mode="run", rootdir=work,
                              config=composed.resolved, tags={}, steps=(), write=warnings.append)
    opened = time.perf_counter() - started
    started = time.perf_counter()
    for line in lines:
        tracking.step(line)
    per_step = (time.perf_counter() - started) / steps
    started = time.perf_counter()
    tracking.summary({f"post/task/t{i}/success_rate": 0.5 for i in range(50)}, step=steps)
    tracking.artifacts(run_dir)
    tracking.finish(failed=False)
    closing = time.perf_counter() - started
    result.update(open_s=opened, step_s=per_step, step_ratio=per_step / baseline, close_s=closing,
                  warnings=warnings)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--trackers", nargs="+", default=["tensorboard", "wandb", "mlflow"])
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min), "
          f"{os.cpu_count()} cores; {args.steps} steps")
    print(f"{'tracker':12} {'open s':>8} {'step ms':>9} {'steps.jsonl ms':>15} {'step ratio':>11} {'close s':>8}")
    for name in args.trackers:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:12} {row['open_s']:8.2f} {1e3 * row['step_s']:9.3f} {1e3 * row['baseline_step_s']:15.3f} "
              f"{row['step_ratio']:11.1f} {row['close_s']:8.2f}" + (f"  WARN {row['warnings']}" if row['warnings'] else ""))


if __name__ == "__main__":
    main()
