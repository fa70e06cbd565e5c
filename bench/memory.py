"""Harness-process memory on a multi-turn sampling load, with and without the heap trimmer.

The in-process sampler (`HFLocalSampler`, SmolLM2-135M-Instruct from `agentcore-rl models
prepare smollm2-135m-instruct`) serves `--sessions` concurrent multi-turn sessions for `--rounds`
rounds: each session starts from a shared system prefix plus its own question, and every turn
appends the sampled reply and a tool output of random length, so prompts grow and KV rows join and
leave the running batch in changing sizes, as an agent's do. The same load runs twice, each in its
own process: `AGENTCORE_RL_MALLOC_TRIM_S=0` (the baseline: glibc keeps freed memory in its arenas)
and the default trimmer (`agentcore_rl_harness/heap.py`). Printed per round: RSS, peak RSS, the
prefix cache's tokens, wall time; then the ratios trimmed / baseline of final RSS, peak RSS and
wall time, and the load average.

    HF_HUB_OFFLINE=1 python bench/memory.py [--sessions 16] [--turns 6] [--rounds 2] [--interval 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time


def rss_mib() -> tuple[int, int]:
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) // 1024
    return values["VmRSS"], values["VmHWM"]


async def session(sampler, rng: random.Random, system: list[int], turns: int) -> None:
    from agentcore_rl_harness.records import SamplingParams

    prompt = system + [rng.randrange(100, 40000) for _ in range(rng.randrange(50, 200))]
    for _ in range(turns):
        params = SamplingParams(max_tokens=64, temperature=1.0, seed=rng.randrange(1 << 30))
        result = await sampler.sample(prompt_token_ids=prompt, params=params)
        prompt += list(result.token_ids) + [rng.randrange(100, 40000) for _ in range(rng.randrange(30, 150))]


async def load(args: argparse.Namespace) -> None:
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    sampler = HFLocalSampler.from_path("smollm2-135m-instruct", max_batch_size=args.sessions)
    system = [random.Random(0).randrange(100, 40000) for _ in range(600)]
    for round_ in range(args.rounds):
        started = time.perf_counter()
        await asyncio.gather(*(
            session(sampler, random.Random(round_ * 1000 + i), system, args.turns) for i in range(args.sessions)
        ))
        rss, peak = rss_mib()
        print(json.dumps({"round": round_, "rss_mib": rss, "peak_mib": peak,
                          "cached_tokens": sampler.cached_prefix_tokens,
                          "wall_s": round(time.perf_counter() - started, 1)}), flush=True)
    sampler.close()


def run_child(args: argparse.Namespace, trim: str) -> list[dict]:
    env = dict(os.environ, AGENTCORE_RL_MALLOC_TRIM_S=trim, HF_HUB_OFFLINE="1")
    command = [sys.executable, __file__, "--child", "--sessions", str(args.sessions),
               "--turns", str(args.turns), "--rounds", str(args.rounds)]
    rows = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as child:
        for line in child.stdout:
            if line.startswith("{"):
                rows.append(json.loads(line))
                label = "baseline (no trim)" if trim == "0" else f"trim every {trim} s"
                print(f"{label:<20} {line.strip()}", flush=True)
    if child.returncode != 0:
        raise SystemExit(f"the {trim!r} run failed with exit code {child.returncode}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval", type=float, default=10.0, help="the trimmed run's AGENTCORE_RL_MALLOC_TRIM_S")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(load(args))
        return 0
    print(f"{args.sessions} sessions x {args.turns} turns x {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    baseline = run_child(args, "0")
    trimmed = run_child(args, f"{args.interval:g}")
    last_b, last_t = baseline[-1], trimmed[-1]
    wall_b = sum(row["wall_s"] for row in baseline)
    wall_t = sum(row["wall_s"] for row in trimmed)
    print(f"final RSS  {last_t['rss_mib']} / {last_b['rss_mib']} MiB = {last_t['rss_mib'] / last_b['rss_mib']:.2f}x")
    print(f"peak RSS   {last_t['peak_mib']} / {last_b['peak_mib']} MiB = {last_t['peak_mib'] / last_b['peak_mib']:.2f}x")
    print(f"wall time  {wall_t:.0f} / {wall_b:.0f} s = {wall_t / wall_b:.2f}x   (load now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
