"""Sync vs overlap_rollouts vs async training under heavy-tailed episode times, in one run.

A toy project: the agent asks the model once, waits in a "tool" for a lognormal time (a real
sleep inside the agent's session: median `--median-s`, sigma `--sigma`; sigma 2 puts p99 at ~100x
the median), then asks the model again with the tool's result; reward 1 when the final reply has
an even length. Each mode is one `pytest --agentcore-rl train` subprocess (tiny model, local
runtime, real gateway and trainer) training the same number of samples (steps x batch_rows x
samples): `algo.group_size` is set explicitly, so `recipe=auto` keeps it in every mode (sync
training would otherwise double it after uninformative steps). Modes that drop (`stragglers=drop`)
or cut (`stragglers=partial`) samples train fewer, and say how many; `stragglers=wait` may train a
group more in a step than `batch_rows` (a group it would otherwise leave more than K behind).
From each run's `train/steps.jsonl`:

- trainer busy: the updates' wall time over the training's wall time (the steps' totals: from the
  training loop's start, i.e. the first rollout, to the last update's end, less the time the
  loop spent writing each step line and checkpoint);
- trained samples per minute of training wall time (the rollouts the steps trained);
- staleness: trained samples by lag in versions (async: per sample; sync modes: `staleness_max`);
- dropped / cut: samples dropped as more than K behind / stragglers cut from partial groups;
- final reward: mean training reward of the last third of the steps (noisy: few samples).

Async modes also get a breakdown of where the trainer idled (`idle_breakdown`, from each step
line's `async.times_s`), with "busy after the fill": the updates' time over the span from the
first update's start. That is not the headline figure (the headline counts from the first
rollout, as sync's wall does); it says how much of the idle time is the first batch's rollouts,
a fixed cost that more `--steps` amortize. The target is a ratio of rates, not a number of
steps: 8 steps leave the first batch (20-25 s with SmolLM2 here) a quarter of an async run.

    HF_HUB_OFFLINE=1 nice -n 10 python bench/async.py [--steps 6] [--modes sync,overlap,async1,...] \\
        [--model tiny|smollm2-135m-instruct] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

AGENT = '''
import hashlib, math, random, time
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    messages = [{"role": "user", "content": payload["question"]}]
    first = client.chat.completions.create(model=rollout["model_id"], messages=messages)
    seed = int(hashlib.sha256(rollout["api_key"].encode()).hexdigest()[:8], 16)
    wait = min(random.Random(seed).lognormvariate(math.log(payload["median_s"]), payload["sigma"]),
               payload["cap_s"])
    time.sleep(wait)  # the tool: a slow shell command, an API, a build
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                 {"role": "user", "content": f"The tool took {wait:.1f} s. Answer now."}]
    final = client.chat.completions.create(model=rollout["model_id"], messages=messages)
    return {"reply": final.choices[0].message.content or "", "tool_s": wait}
'''

TASK = '''
import agentcore_rl_harness as arl

@arl.reward
def even_length(rollout, row):
    return float(len(rollout.result["reply"]) % 2 == 0)

@arl.task(dataset="data.jsonl", agent="agent.py", samples={samples}, rewards=[even_length])
def test_bench(rollout, row):
    assert rollout.reward == 1.0
'''

MODES = {
    "sync": [],
    "overlap": ["trainer.overlap_rollouts=true"],
    "async1": ["trainer.mode=async", "algo.max_staleness=1"],
    "async2": ["trainer.mode=async", "algo.max_staleness=2"],
    "async4": ["trainer.mode=async", "algo.max_staleness=4"],
    "async2drop": ["trainer.mode=async", "algo.max_staleness=2", "algo.stragglers=drop"],
    "async2partial": ["trainer.mode=async", "algo.max_staleness=2", "algo.stragglers=partial"],  # fraction 0.5
    "async2partial75": ["trainer.mode=async", "algo.max_staleness=2", "algo.stragglers=partial",
                        "algo.min_group_fraction=0.75"],
    "async4partial": ["trainer.mode=async", "algo.max_staleness=4", "algo.stragglers=partial"],
}


def write_project(root: Path, args: argparse.Namespace) -> None:
    rows = [{"id": f"r{i}", "split": "train", "question": f"Say {i}", "median_s": args.median_s,
             "sigma": args.sigma, "cap_s": args.cap_s} for i in range(16)]
    rows.append({"id": "t0", "split": "test", "question": "Say t", "median_s": 0.0 + 1e-3, "sigma": 0.0,
                 "cap_s": 0.0})
    (root / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (root / "agent.py").write_text(AGENT)
    (root / "test_bench.py").write_text(TASK.format(samples=args.samples))


def run_mode(root: Path, mode: str, args: argparse.Namespace) -> dict:
    out = root / f"run-{mode}"
    sets = [f"model={args.model}", "sampling.max_tokens=8", f"trainer.steps={args.steps}",
            f"trainer.batch_rows={args.batch_rows}", f"runtime.concurrency={args.concurrency}",
            f"algo.group_size={args.samples}",
            f"trainer.checkpoint_every={args.steps}", "report.progress=off", "eval.timeout_s=600",
            *MODES[mode]]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--agentcore-rl", "train",
               "--agentcore-rl-out", str(out), *[x for s in sets for x in ("--agentcore-rl-set", s)]]
    started = time.monotonic()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    steps = [json.loads(x) for x in (out / "train" / "steps.jsonl").read_text().splitlines() if x]
    wall = sum(s["wall_time_s"]["total"] for s in steps)
    train = sum(s["wall_time_s"]["train"] for s in steps)
    trained = sum(s["rollouts"] - sum(s["excluded"].values()) - s.get("async", {}).get("dropped_stale", 0)
                  for s in steps)
    lags: dict[int, int] = {}
    for s in steps:
        if "async" in s:
            for lag, count in s["async"]["staleness"].items():
                lags[int(lag)] = lags.get(int(lag), 0) + count
        else:
            lag = s["staleness_max"] or 0
            lags[lag] = lags.get(lag, 0) + s["rollouts"]
    timeline = idle_breakdown(steps)
    tail = steps[-max(1, len(steps) // 3):]
    rewards = [s["reward_mean"] for s in tail if s["reward_mean"] is not None]
    return {"mode": mode, "steps": len(steps), "trained": trained, "wall_s": wall, "busy": train / wall,
            "per_min": 60 * trained / wall, "lags": dict(sorted(lags.items())),
            "dropped": sum(s.get("async", {}).get("dropped_stale", 0) for s in steps),
            "cut": sum(s.get("async", {}).get("cut_stragglers", 0) for s in steps),
            "paced": sum(s.get("async", {}).get("paced_starts", 0) for s in steps),
            "reward": sum(rewards) / len(rewards) if rewards else None, "process_s": time.monotonic() - started,
            "timeline": timeline}


def idle_breakdown(steps: list[dict]) -> dict | None:
    """Where the trainer idled, from the async step lines' `async.times_s` (seconds since the
    training loop started): None for sync modes, which do not record them.

    - span: the loop's start to the last update's end (the whole training, bookkeeping included);
    - fill: the loop's start to the first update's start (the first batch's rollouts);
    - waiting: after the first update, the trainer idle because no batch was ready (from an
      update's end to the end of the last rollout the next update trains);
    - pickup: a batch was ready and the trainer idle, but the loop had not started the update
      yet (scoring, the step line, checkpoint writes, starting new groups);
    - busy: the updates' time (update start to end; the weight sync to the sampler included);
    - steady busy: busy over the span after the first update's start (the fill left out)."""
    times = [s.get("async", {}).get("times_s") for s in steps]
    if not times or any(t is None or t["update_end"] is None for t in times):
        return None
    span = times[-1]["update_end"]
    updates = sum(t["update_end"] - t["update_start"] for t in times)
    waiting = pickup = 0.0
    for previous, t in zip(times, times[1:]):
        available = max(previous["update_end"], t["batch_ready"] or 0.0)
        waiting += max(0.0, available - previous["update_end"])
        pickup += t["update_start"] - available
    first = times[0]["update_start"]
    return {"span": span, "fill": first, "waiting": waiting, "pickup": pickup, "updates": updates,
            "busy": updates / span, "steady_busy": updates / (span - first)}


def sample_load(stop: threading.Event, seen: list[float]) -> None:
    while not stop.wait(5.0):
        seen.append(os.getloadavg()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-rows", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--median-s", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=1.5)
    parser.add_argument("--cap-s", type=float, default=60.0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--keep", type=Path, default=None,
                        help="a folder to copy each mode's run directory into (its steps.jsonl, rollouts.jsonl)")
    parser.add_argument("--model", default="tiny",
                        help="the policy: `tiny` (an update costs ~0.1 s, so 'trainer busy' stays low in "
                             "every mode) or `smollm2-135m-instruct` (SmolLM2-135M with the recipe's LoRA: "
                             "an update costs seconds, as a real one does)")
    args = parser.parse_args()
    stop, seen = threading.Event(), [os.getloadavg()[0]]
    threading.Thread(target=sample_load, args=(stop, seen), daemon=True).start()
    unknown = [mode for mode in args.modes.split(",") if mode not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {unknown}; valid: {','.join(MODES)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="arl-bench-async-") as folder:
        root = Path(folder)
        write_project(root, args)
        for mode in args.modes.split(","):
            results.append(run_mode(root, mode, args))
            if args.keep is not None:
                shutil.copytree(root / f"run-{mode}", args.keep / f"run-{mode}", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("checkpoints"))
            print(f"{mode}: done in {results[-1]['process_s']:.0f}s", file=sys.stderr)
    stop.set()
    base = next((r for r in results if r["mode"] == "sync"), results[0])
    print(f"model {args.model}; {args.steps} steps x {args.batch_rows} rows x {args.samples} samples per mode "
          f"({args.steps * args.batch_rows * args.samples} samples); tool wait "
          f"lognormal(median {args.median_s} s, sigma {args.sigma}, cap {args.cap_s} s); concurrency "
          f"{args.concurrency}; load average {min(seen):.1f}-{max(seen):.1f} (mean {sum(seen) / len(seen):.1f})")
    print("| mode | trained samples | training wall s | trainer busy | samples/min | vs sync | "
          "staleness (lag: samples) | dropped | cut | paced starts | final reward |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        lags = ", ".join(f"{lag}: {n}" for lag, n in r["lags"].items())
        reward = "n/a" if r["reward"] is None else f"{r['reward']:.3f}"
        print(f"| {r['mode']} | {r['trained']} | {r['wall_s']:.1f} | {100 * r['busy']:.0f}% | {r['per_min']:.1f} | "
              f"{r['per_min'] / base['per_min']:.2f}x | {lags} | {r['dropped']} | {r['cut']} | {r['paced']} | "
              f"{reward} |")
    broken = [r for r in results if r["timeline"]]
    if broken:
        print("\nWhere the trainer idled (seconds; async modes, from `async.times_s`; see idle_breakdown):")
        print("| mode | span s | fill (first batch) | waiting for a batch | pickup (ready, not started) | "
              "updates | busy of span | busy after the fill |")
        print("|---|---|---|---|---|---|---|---|")
        for r in broken:
            t = r["timeline"]
            print(f"| {r['mode']} | {t['span']:.1f} | {t['fill']:.1f} | {t['waiting']:.1f} | {t['pickup']:.1f} | "
                  f"{t['updates']:.1f} | {100 * t['busy']:.0f}% | {100 * t['steady_busy']:.0f}% |")
    nominal = args.steps * args.batch_rows * args.samples
    off = [f"{r['mode']} {r['trained']}" for r in results if r["trained"] != nominal]
    print(f"trained samples: {nominal} in every mode" if not off else
          f"trained samples: {nominal} nominal; off it: {', '.join(off)} (dropped / cut samples, failed rollouts "
          "left out of their groups, or groups a `wait` step took beyond batch_rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
