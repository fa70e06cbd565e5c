"""Reproduce an RL lift from scratch: one `pytest --agentcore-rl run` in a fresh run directory
(default: the bundled `tasks/` with the shipped configs; `--task office` the office pack's level 1m,
`--task migration` the migration pack's level 1, each with its pack's own config and so the adaptive
default `recipe=auto`; `--config FILE` runs a recipe file instead, e.g. the office pack's hand-tuned
`tasks/office/configs/lift.yaml`), then print the command, pre / warm-up / post success,
each paired delta with its p-value, tool calls per successful episode, wall time, peak RSS and
the load average seen while it ran.

    HF_HUB_OFFLINE=1 python bench/rl_lift.py [--task office|migration] [--config FILE] [--out DIR] [--seeds N] [extra --agentcore-rl-set overrides]

`--seeds N` runs the same command N times with `seed=0..N-1` (one run directory each, DIR/seed-K),
then prints one row per seed (pre -> after the warm-up -> post, RL's own delta and its p, wall
time, the recipe's choices) and the spread of the post success and of the deltas.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# task -> (pytest arguments, the pack's own config: its model and budgets, no recipe file)
TASKS = {
    "arithmetic": (["tasks"], None),
    "office": (["tasks/office", "-k", "level1m"], "tasks/office/configs"),
    "migration": (["tasks/migration", "-k", "level1"], "tasks/migration/configs"),
}


def sample_load(stop: threading.Event, seen: list[float], every_s: float = 15.0) -> None:
    while True:
        seen.append(os.getloadavg()[0])
        if stop.wait(every_s):
            return


def tool_calls_per_success(run_dir: Path) -> dict[str, tuple[float, int]]:
    """phase -> (mean tool calls of its successful episodes, how many), from rollouts.jsonl."""
    calls: dict[str, list[int]] = {}
    for line in (run_dir / "rollouts.jsonl").read_text().splitlines():
        record = json.loads(line)
        if not record.get("success") or record["phase"] not in ("pre", "warmup", "post", "eval"):
            continue
        made = (record.get("result") or {}).get("tool_calls")
        count = len(made) if isinstance(made, list) else made
        if isinstance(count, int):
            calls.setdefault(record["phase"], []).append(count)
    return {phase: (sum(v) / len(v), len(v)) for phase, v in calls.items()}


def print_delta(label: str, delta: dict, before: str, after: str) -> None:
    print(f"{label:<24}{delta['pre']:.3f} -> {delta['post']:.3f}  ({before} -> {after}, "
          f"{delta['pairs']} pairs): {100 * delta['delta']:+.1f} pp, {delta['improved']} improved, "
          f"{delta['regressed']} regressed, McNemar p = {delta['p_value']:.2g}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: a temp dir)")
    parser.add_argument("--task", choices=sorted(TASKS), default="arithmetic",
                        help="which task: the bundled arithmetic task (default), the office pack's level 1m, "
                             "the migration pack's level 1")
    parser.add_argument("--office", action="store_true", help="the same as --task office")
    parser.add_argument("--config", default=None,
                        help="a config file or directory instead of the task's own, e.g. tasks/office/configs/lift.yaml")
    parser.add_argument("--seeds", type=int, default=None, help="run N times with seed=0..N-1 and report the spread")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. trainer.steps=8")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rl-lift-")) / "run"
    selection, config = TASKS["office" if args.office else args.task]
    target = [*selection, *(["--agentcore-rl-config", args.config or config] if args.config or config else [])]
    if args.seeds is None:
        return 0 if run_once(target, args.overrides, out) is not None else 1
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: give at least 1")
    if any(o.startswith(("seed=", "++seed=")) for o in args.overrides):
        parser.error("--seeds sets seed=K itself; drop the seed= override")
    runs = []
    for seed in range(args.seeds):
        print(f"\n=== seed {seed} of {args.seeds} ===", flush=True)
        runs.append(run_once(target, [*args.overrides, f"seed={seed}"], out / f"seed-{seed}"))
    print_spread(runs)
    return 0 if all(r is not None for r in runs) else 1


def print_spread(runs: list[dict | None]) -> None:
    """One row per seed, then mean / std / min / max of the post success and the deltas."""
    print("\n| seed | pre | after warm-up | post | delta (pp) | p | RL's own (pp) | RL's p | wall (min) | recipe |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed, run in enumerate(runs):
        if run is None:
            print(f"| {seed} | run failed | | | | | | | | |")
            continue
        warm = "—" if run["warmup"] is None else f"{run['warmup']:.3f}"
        rl = "—" if run["rl_delta"] is None else f"{100 * run['rl_delta']:+.1f}"
        rl_p = "—" if run["rl_p"] is None else f"{run['rl_p']:.2g}"
        print(f"| {seed} | {run['pre']:.3f} | {warm} | {run['post']:.3f} | {100 * run['delta']:+.1f} | "
              f"{run['p']:.2g} | {rl} | {rl_p} | {run['wall_min']:.1f} | {'; '.join(run['recipe']) or '—'} |")
    done = [run for run in runs if run is not None]
    for key, label in (("post", "post success"), ("delta", "delta"), ("rl_delta", "RL's own delta")):
        values = [run[key] for run in done if run[key] is not None]
        if values:
            spread = statistics.pstdev(values) if len(values) > 1 else 0.0
            print(f"{label:<16}mean {statistics.fmean(values):.3f}, std {spread:.3f}, min {min(values):.3f}, "
                  f"max {max(values):.3f} over {len(values)} seed(s)")


def run_once(target: list[str], overrides: list[str], out: Path) -> dict | None:
    """One run, its lines printed; its summary (None when it failed)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--agentcore-rl",
               "run", *target, "--agentcore-rl-out", str(out)]
    for override in overrides:
        command += ["--agentcore-rl-set", override]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    print(f"command         {shlex.join(command)}", flush=True)
    loads: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(stop, loads), daemon=True)
    sampler.start()
    started = time.monotonic()
    run = subprocess.Popen(command, cwd=ROOT, env=env)  # its progress lines show as it runs
    # `kill` of this script stops the run too (the harness stops on SIGTERM, keeping what it has)
    signal.signal(signal.SIGTERM, lambda signum, frame: run.terminate())
    returncode = run.wait()
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    peak_rss_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    report_path = out / "report.json"
    if returncode != 0 or not report_path.is_file():
        print(f"run failed with exit code {returncode} (its output is above)")
        return None
    report = json.loads(report_path.read_text())
    delta = report["delta"]["overall"]
    steps = [s["reward_mean"] for s in report.get("train") or []]
    print(f"run directory   {out}")
    print(f"pre success     {delta['pre']:.3f}  ({delta['pairs']} paired rollouts)")
    if report.get("warmup_delta") and report.get("rl_delta"):
        print(f"warm-up success {report['rl_delta']['overall']['pre']:.3f}")
    print(f"post success    {delta['post']:.3f}")
    print_delta("delta (pre -> post)", delta, "pre", "post")
    if report.get("warmup_delta") and report.get("rl_delta"):
        print_delta("warm-up's delta", report["warmup_delta"]["overall"], "pre", "warm-up")
        print_delta("RL's delta", report["rl_delta"]["overall"], "warm-up", "post")
    print(f"reward / step   {', '.join(f'{r:.2f}' for r in steps if r is not None)}")
    for phase, (mean, count) in sorted(tool_calls_per_success(out).items()):
        print(f"tool calls      {mean:.2f} per successful episode in phase {phase} ({count} episodes)")
    print(f"wall time       {wall / 60:.1f} min")
    print(f"peak RSS        {peak_rss_gb:.2f} GB (largest process: the pytest/trainer process)")
    print(f"load average    1-min mean {sum(loads) / len(loads):.2f}, max {max(loads):.2f} "
          f"(sampled every 15 s while it ran; {os.cpu_count()} cores)")
    recipe = (report.get("recipe") or {}).get("choices") or []
    for choice in recipe:
        print(f"recipe          {choice['at']}: {choice['key']} {'=' if choice['applied'] else 'stays'} "
              f"{choice['value']!r}: {choice['reason']}")
    rl = (report.get("rl_delta") or {}).get("overall")
    return {"pre": delta["pre"], "post": delta["post"], "delta": delta["delta"], "p": delta["p_value"],
            "warmup": rl["pre"] if rl else None, "rl_delta": rl["delta"] if rl else None,
            "rl_p": rl["p_value"] if rl else None, "wall_min": wall / 60,
            "recipe": [f"{c['key']}={c['value']!r}" for c in recipe if c["applied"]]}


if __name__ == "__main__":
    raise SystemExit(main())
