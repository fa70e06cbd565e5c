"""Gateway overhead: turns/s and added latency vs the bare sampler; the anchor side by side.

A fixed sampling backend (a constant 16-token reply, no model) isolates what the gateway adds:
HTTP, rendering with the SmolLM2 tokenizer and template, the turn tree, parsing. Each session is
a multi-turn conversation driven by the real `openai.AsyncOpenAI` client over loopback HTTP, from
a child process (`--target drive`) so the client's CPU does not share the server's GIL.

Run:  python bench/gateway.py [--turns 4] [--sessions 1 16 64 128] [--anchor-python /tmp/anchor-venv/bin/python]
The anchor (awslabs agentcore-rl-toolkit's RolloutGateway) runs in its own venv: this same file
is re-executed there with `--target anchor` and prints one JSON line per concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPLY = "Sure. The answer to that question is forty two, as always."


async def drive(base_url: str, session_ids: list[str], turns: int) -> tuple[float, list[float]]:
    """Run every session's conversation concurrently; (wall seconds, per-turn latencies).

    The clients are built before the clock starts: building an `AsyncOpenAI` client creates an
    SSL context (~10 ms of CPU), which is the driver's cost, not the gateway's."""
    from openai import AsyncOpenAI

    latencies: list[float] = []
    clients = {s: AsyncOpenAI(base_url=base_url, api_key=s, max_retries=0, timeout=120) for s in session_ids}

    async def one(session_id: str) -> None:
        client = clients[session_id]
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is six times seven?"}]
        for turn in range(turns):
            start = time.perf_counter()
            completion = await client.chat.completions.create(model="policy", messages=messages, temperature=1.0)
            latencies.append(time.perf_counter() - start)
            messages += [{"role": "assistant", "content": completion.choices[0].message.content},
                         {"role": "user", "content": f"And again, turn {turn + 2}?"}]

    start = time.perf_counter()
    await asyncio.gather(*(one(s) for s in session_ids))
    wall = time.perf_counter() - start
    for client in clients.values():
        await client.close()
    return wall, latencies


def drive_elsewhere(base_url: str, session_ids: list[str], turns: int) -> tuple[float, list[float]]:
    """`drive` in a child process (this file, `--target drive`), so that the client's CPU (the
    openai SDK costs about as much per request as a gateway) does not share the server's GIL;
    both targets are driven this way."""
    command = [sys.executable, os.path.abspath(__file__), "--target", "drive", "--base-url", base_url,
               "--turns", str(turns), "--session-ids=" + ",".join(session_ids)]  # ids may start with "-"
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"driver failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return row["wall"], row["latencies"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(target: str, sessions: int, turns: int, wall: float, latencies: list[float], direct_s: float,
           cpu_s: float) -> dict:
    """`cpu_ms_per_turn`: the server process's CPU time (all threads) per turn while driven; unlike
    turns/s it does not depend on the driver's speed or on other load on the machine."""
    return {"target": target, "sessions": sessions, "turns": len(latencies), "turns_per_s": len(latencies) / wall,
            "cpu_ms_per_turn": cpu_s * 1e3 / len(latencies),
            "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3,
            "added_p50_ms": (percentile(latencies, 0.5) - direct_s) * 1e3,
            "added_p99_ms": (percentile(latencies, 0.99) - direct_s) * 1e3}


def tiny_tokenizer_dir() -> str:
    from agentcore_rl_harness.models import prepare_model

    return str(prepare_model("tiny"))


# --- ours -----------------------------------------------------------------------------------

def run_ours(tokenizer_dir: str, concurrency: list[int], turns: int) -> list[dict]:
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.models import load_tokenizer
    from agentcore_rl_harness.records import FinishReason, SampleResult

    tokenizer = load_tokenizer(tokenizer_dir)
    renderer = ChatTemplateRenderer(tokenizer)
    reply_ids = tuple(renderer.encode(REPLY)) + (renderer.stop_token_ids[0],)
    result = SampleResult(reply_ids, (-0.1,) * len(reply_ids), FinishReason.STOP)

    class FixedSampler:
        async def sample(self, *, prompt_token_ids, params, on_token=None):
            if on_token is not None:
                for token_id, logprob in zip(result.token_ids, result.logprobs):
                    on_token(token_id, logprob)
            return result

    sampler = FixedSampler()
    direct_s = statistics.median(_direct_calls(sampler))
    rows = []
    with GatewayServer(sampler=sampler, renderer=renderer, model_id="policy") as server:
        asyncio.run(drive(server.base_url, [server.sessions.open()], 2))  # warm-up
        for sessions in concurrency:
            ids = [server.sessions.open() for _ in range(sessions)]
            cpu = time.process_time()
            wall, latencies = drive_elsewhere(server.base_url, ids, turns)
            rows.append(report("ours", sessions, turns, wall, latencies, direct_s, time.process_time() - cpu))
            for session_id in ids:
                server.sessions.finish(session_id)
    return rows


def _direct_calls(sampler, n: int = 2000) -> list[float]:
    async def run() -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await sampler.sample(prompt_token_ids=(1, 2, 3), params=None)
            times.append(time.perf_counter() - start)
        return times
    return asyncio.run(run())


# --- the anchor (runs in its own venv) ------------------------------------------------------

def run_anchor(tokenizer_dir: str, concurrency: list[int], turns: int) -> list[dict]:
    import uuid

    from agentcore_rl_toolkit.rollout_gateway import HfTemplateRenderer, RolloutGateway, ThreadedGatewayServer
    from agentcore_rl_toolkit.rollout_gateway.trajectory import TurnRecord
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    reply_ids = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    class FixedBackend:
        async def generate(self, *, prompt_ids, sampling_params, session_id=None, image_data=None, video_data=None):
            return TurnRecord(prompt_ids=list(prompt_ids), output_ids=list(reply_ids), finish_reason="stop",
                              output_log_probs=[-0.1] * len(reply_ids))

    backend = FixedBackend()

    async def direct_calls() -> list[float]:
        times = []
        for _ in range(2000):
            start = time.perf_counter()
            await backend.generate(prompt_ids=[1, 2, 3], sampling_params={})
            times.append(time.perf_counter() - start)
        return times
    direct_s = statistics.median(asyncio.run(direct_calls()))
    gateway = RolloutGateway(backend=backend, renderer=HfTemplateRenderer(tokenizer, stop_sequences=["<|im_end|>"]),
                             tokenizer=tokenizer, adapters=["openai"])
    server = ThreadedGatewayServer(gateway, host="127.0.0.1", port=0)
    server.start()
    rows = []
    try:
        warm = uuid.uuid4().hex
        gateway.create_session(warm)
        asyncio.run(drive(server.base_url, [warm], 2))  # warm-up
        for sessions in concurrency:
            ids = [uuid.uuid4().hex for _ in range(sessions)]
            for session_id in ids:
                gateway.create_session(session_id)
            cpu = time.process_time()
            wall, latencies = drive_elsewhere(server.base_url, ids, turns)
            rows.append(report("anchor", sessions, turns, wall, latencies, direct_s, time.process_time() - cpu))
    finally:
        server.shutdown()
    return rows


# --- trace linearization --------------------------------------------------------------------

def time_linearization(turn_counts: tuple[int, ...] = (25, 50, 100), tokens_per_turn: int = 320) -> list[dict]:
    """`TurnTree.traces()` for a linear session of N turns (320 tokens each: 32k at 100 turns)."""
    from agentcore_rl_harness.gateway.rendering import ParsedReply
    from agentcore_rl_harness.gateway.trajectory import PromptPlan, TurnTree
    from agentcore_rl_harness.records import FinishReason, SampleResult

    rows = []
    sampled, glue = tokens_per_turn * 3 // 4, tokens_per_turn // 4
    for turns in turn_counts:
        tree = TurnTree(renderer=None)
        prompt: tuple[int, ...] = tuple(range(200))
        parent = None
        for index in range(turns):
            plan = PromptPlan(prompt, ({"role": "user", "content": str(index)},), "", parent, False)
            completion = tuple((index * 7 + i) % 4000 for i in range(sampled))
            turn = tree.record(plan, SampleResult(completion, (-0.5,) * sampled, FinishReason.STOP),
                               ParsedReply(content=f"reply {index}"))
            parent = turn.index
            prompt = prompt + completion + tuple(range(glue))
        best = min(_timed(tree.traces) for _ in range(5))
        (trace,) = tree.traces()
        rows.append({"turns": turns, "tokens": len(trace.token_ids), "linearize_ms": best * 1e3,
                     "us_per_1k_tokens": best * 1e6 / (len(trace.token_ids) / 1000)})
    return rows


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=["all", "ours", "anchor", "drive"], default="all")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokenizer-dir", default=None)
    parser.add_argument("--anchor-python", default="/tmp/anchor-venv/bin/python")
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--session-ids", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.target == "drive":
        wall, latencies = asyncio.run(drive(args.base_url, args.session_ids.split(","), args.turns))
        print(json.dumps({"wall": wall, "latencies": latencies}), flush=True)
        return

    if args.target == "anchor":
        for row in run_anchor(args.tokenizer_dir, args.sessions, args.turns):
            print(json.dumps(row), flush=True)
        return
    tokenizer_dir = args.tokenizer_dir or tiny_tokenizer_dir()
    ours = run_ours(tokenizer_dir, args.sessions, args.turns)
    for row in ours:
        print(json.dumps(row), flush=True)
    if args.target == "all":
        anchor = _anchor_rows(args, tokenizer_dir)
        by_sessions = {row["sessions"]: row for row in anchor}
        for row in ours:
            other = by_sessions.get(row["sessions"])
            if other:
                print(f"sessions={row['sessions']:>4}  turns/s ours {row['turns_per_s']:8.1f}  anchor "
                      f"{other['turns_per_s']:8.1f}  ratio {row['turns_per_s'] / other['turns_per_s']:.2f}x  |  "
                      f"p50 ms ours {row['p50_ms']:.2f} anchor {other['p50_ms']:.2f}  |  "
                      f"p99 ms ours {row['p99_ms']:.2f} anchor {other['p99_ms']:.2f}  |  "
                      f"server cpu ms/turn ours {row['cpu_ms_per_turn']:.2f} anchor {other['cpu_ms_per_turn']:.2f}")
    for row in time_linearization():
        print(json.dumps(row), flush=True)


def _anchor_rows(args: argparse.Namespace, tokenizer_dir: str) -> list[dict]:
    if not os.path.exists(args.anchor_python):
        print(f"anchor skipped: {args.anchor_python} not found (python -m venv /tmp/anchor-venv && "
              "/tmp/anchor-venv/bin/pip install 'agentcore-rl-toolkit[gateway]' openai)", flush=True)
        return []
    command = [args.anchor_python, os.path.abspath(__file__), "--target", "anchor", "--tokenizer-dir", tokenizer_dir,
               "--turns", str(args.turns), "--sessions", *map(str, args.sessions)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        print(f"anchor failed (exit {done.returncode}):\n{done.stderr[-3000:]}", flush=True)
        return []
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
