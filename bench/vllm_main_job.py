"""The arithmetic main job (the bundled `tasks/`) with `sampler=vllm` beside the in-process sampler,
in one invocation: each arm is one `bench/rl_lift.py` run (pre-eval, GRPO, post-eval) in a fresh
run directory, one after the other. Printed per arm, one JSON line: lift (pre -> post success and
its McNemar p), wall time, CPU time and peak RSS of that arm's own process tree (`os.wait4`: the
harness, its agents and, for vLLM, the engine it launches; `peak_rss_mb` is the largest single
process, `peak_tree_rss_mb` the whole tree's RSS sampled every 5 s), the weight sync per step
(`sync_s` of `train/steps.jsonl`) and the load average seen while it ran. Both arms train the
shipped LoRA (r=16); the vLLM arm pushes the adapter after each step (`trainer.serve_merged=false`),
the in-process arm serves its merged copy as shipped.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/vllm_main_job.py [--arms hf,vllm] [--out DIR] \\
        [extra --agentcore-rl-set overrides, e.g. trainer.steps=4]

Needs the venv of `scripts/vllm-venv`. On 2 shared cores a full main job takes tens of minutes
per arm: pass e.g. `trainer.steps=2` for a quick look.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "hf": [],
    "vllm": ["sampler=vllm", "trainer.serve_merged=false"],
}
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_rss_kb(root: int) -> int:
    """The summed RSS of `root` and every process below it (from /proc; 0 once it is gone)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[int(entry.name)] = pages * PAGE_KB
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


def watch(pid: int, stop: threading.Event, seen: dict[str, list[float]], every_s: float = 5.0) -> None:
    """Every `every_s` until `stop`: the tree's RSS and the 1-minute load average."""
    while not stop.wait(every_s):
        seen["rss_kb"].append(tree_rss_kb(pid))
        seen["load"].append(os.getloadavg()[0])


def summarize_steps(steps_file: Path) -> dict:
    """Steps, and the mean weight sync and train time per step, from `train/steps.jsonl`."""
    if not steps_file.is_file():
        return {"steps": 0}
    steps = [json.loads(line) for line in steps_file.read_text().splitlines() if line]
    syncs = [s["sync_s"] for s in steps if s.get("sync_s") is not None]
    train = [s["wall_time_s"]["train"] for s in steps]
    return {"steps": len(steps), "reward_per_step": [None if s["reward_mean"] is None else round(s["reward_mean"], 3)
                                                     for s in steps],
            "sync_s_per_step": round(sum(syncs) / len(syncs), 3) if syncs else None,
            "sync_s": [round(s, 3) for s in syncs],
            "train_s_per_step": round(sum(train) / len(train), 1) if train else None}


def measure(command: list[str], log: Path) -> dict:
    """Run `command` (its output into `log`) and measure it and only it: wall, CPU and peak RSS of
    its process tree, the load average while it ran. (RUSAGE_CHILDREN would fold in every child
    this script ever waited for: the second arm's peak would be the first's.)"""
    seen: dict[str, list[float]] = {"rss_kb": [], "load": []}
    stop = threading.Event()
    started = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)  # noqa: S603
        watcher = threading.Thread(target=watch, args=(process.pid, stop, seen), daemon=True)
        watcher.start()
        # wait4: this child's own usage and its waited-for descendants'
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    watcher.join()
    return {"rc": process.returncode, "wall_s": round(time.perf_counter() - started, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "peak_tree_rss_mb": round(max(seen["rss_kb"], default=0) / 1024),
            "load_1min_mean": round(sum(seen["load"]) / len(seen["load"]), 2) if seen["load"] else None,
            "load_1min_max": max(seen["load"], default=None)}


def run_arm(name: str, overrides: list[str], out: Path) -> dict:
    command = [sys.executable, str(ROOT / "bench" / "rl_lift.py"), "--out", str(out), *ARMS[name], *overrides]
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{name}.log"
    result = {"arm": name, "command": shlex.join(command), **measure(command, log), "log": str(log)}
    report = out / "report.json"
    if report.is_file():
        delta = json.loads(report.read_text()).get("delta", {}).get("overall", {})
        result.update(pre=delta.get("pre"), post=delta.get("post"), p_value=delta.get("p_value"),
                      pairs=delta.get("pairs"))
    result.update(summarize_steps(out / "train" / "steps.jsonl"))
    if result["rc"] != 0:
        result["tail"] = log.read_text()[-2000:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="hf,vllm")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    unknown = [arm for arm in args.arms.split(",") if arm not in ARMS]
    if unknown:
        parser.error(f"--arms {args.arms!r}: unknown arm(s) {unknown}; choose from {sorted(ARMS)}")
    base = args.out or Path(tempfile.mkdtemp(prefix="vllm-main-job-"))
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}; runs under {base}", flush=True)
    results = []
    for name in args.arms.split(","):
        results.append(run_arm(name, args.overrides, base / name))
        print(json.dumps(results[-1]), flush=True)
    return max(r["rc"] for r in results)


if __name__ == "__main__":
    sys.exit(main())
