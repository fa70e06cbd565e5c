"""Gateway overhead: turns/s and added latency vs the bare sampler; the anchor side by side.

A fixed sampling backend (a constant 16-token reply, no model) isolates what the gateway adds:
HTTP, rendering with the SmolLM2 tokenizer and template, the turn tree, parsing. The load comes
from `bench/_driver.py` in separate processes (raw HTTP/1.1 over one keep-alive connection per
concurrent worker; each worker runs multi-turn sessions back to back), the same driver for every
target, so the driver's CPU does not share the server's GIL. Targets:

  null    a do-nothing ASGI app under the same uvicorn settings: the ceiling of driver + HTTP
  ours    agentcore-rl-harness' GatewayServer
  anchor  awslabs agentcore-rl-toolkit's RolloutGateway (aiohttp), run in its own venv: this file
          is re-executed there with `--target anchor` and prints one JSON line per concurrency.
          Build that venv once (its gateway extra brings aiohttp, transformers, tokenizers; no torch):
            python3 -m venv /tmp/anchor-venv
            /tmp/anchor-venv/bin/pip install 'agentcore-rl-toolkit[gateway]==0.2.0'

`--backend vllm-http` puts the remote-sampler path in: both gateways sample from one fake vLLM
token server (`bench/_token_server.py`, `POST /inference/v1/generate`, the same 16-token reply,
its own process) through their own vLLM HTTP clients (ours: `VLLMSampler` on the pooled client of
`samplers/_pool.py`; the anchor: its `VllmHttpBackend`, aiohttp with a new session and connection
per turn). Non-streamed turns, so ours asks for JSON (`stream: false`).

Per row: turns/s, latency p50/p99 as the driver sees it, `added` = that minus a direct call of
the backend (median, in-process), and the server process's CPU ms per turn (independent of the
driver's speed; noisy on a shared machine but less than turns/s). Where the server's event-loop
thread spent the row (Linux schedstat): on a CPU, runnable but waiting for one, asleep; how often
it was preempted per turn; garbage-collection ms per turn and the full collections. The 1-minute
load average is printed with each row: on a shared machine compare ratios measured in the same run.

Reading it on a busy machine: the server is one CPU-bound thread; when it is off-CPU with turns
queued it is runnable, not waiting on anything of its own (no lock, thread hop or queue sits on
the turn path), so turns/s follows its CPU share. Measured at load 2.4-2.8 on 2 cores, the loop
thread is asleep < 2% of a 64-session row. Both servers run with `gc.freeze()` after loading
(`--no-gc-freeze` to turn off): with transformers and torch imported, a full collection otherwise
walks the whole heap (90-230 ms for ours, 55-215 ms for the anchor).

Run:  python bench/gateway.py [--backend fixed|vllm-http] [--sessions 1 16 64 128] [--turns 8]
                              [--min-turns 3000] [--drivers 1] [--repeat 3]
                              [--anchor-python /tmp/anchor-venv/bin/python] [--no-gc-freeze]
`--repeat N` runs N rounds (null, ours, anchor in turn at every concurrency) and prints medians:
on a shared machine the load moves between targets, and rounds spread that over all of them.

Long sessions:  python bench/gateway.py --scenario long [--long-turns 200] [--long-window 5] [--repeat 3]
                                        [--long-wires chat anthropic responses]
                                        [--long-roles serve path path-fresh]
                                        [--baseline-src /path/to/other/checkout/src] [--no-linearization]
CPU ms per turn of the gateway process (CPU time, not wall) around turn 10 and around turn
`--long-turns` of tool-calling sessions with ~300-token tool outputs (`bench/_long_history.py`),
on each wire: the median over `--repeat` fresh conversations x turns n-w..n+w (w =
`--long-window`), the windows of every wire (and of `--baseline-src`, e.g. `git worktree add
/tmp/base <commit>`, served by its own process) measured side by side, one turn each in turn, so
load that comes and goes weighs on turn 10 and turn 200 alike. One table: wire, turn 10, turn 200,
their ratio, and the ratio of each repeat (its spread shows the noise). `path` and `path-fresh`
add the turn path alone (one process each, its windows side by side). Then the trace
linearization times (CPU) at 100 / 200 / 400 / 800 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
REPLY = "Sure. The answer to that question is forty two, as always."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Driven:
    """What one driven row measured in the server's process."""

    wall_s: float
    latencies: list[float]
    cpu_s: float
    loop_sched: tuple[int, int, int] | None  # the event-loop thread: on-CPU ns, runnable ns, preemptions
    gc_pauses: dict[int, list[float]]  # seconds of each collection, per generation


def run_driven(base_url: str, open_session: Callable[[], str], *, sessions: int, turns: int,
               min_turns: int, drivers: int, driver_python: str) -> Driven:
    """Drive `sessions` concurrent workers from `drivers` child processes. Each worker runs
    enough sessions of `turns` turns for `min_turns` in all."""
    per_worker = max(1, math.ceil(min_turns / (sessions * turns)))
    workers = [[open_session() for _ in range(per_worker)] for _ in range(sessions)]
    shares = [workers[i::drivers] for i in range(drivers) if workers[i::drivers]]
    with tempfile.TemporaryDirectory() as folder:
        children = []
        for index, share in enumerate(shares):
            path = os.path.join(folder, f"workers-{index}.json")
            with open(path, "w") as file:
                json.dump(share, file)
            children.append(subprocess.Popen(
                [driver_python, os.path.join(HERE, "_driver.py"), "--base-url", base_url, "--turns", str(turns),
                 "--workers-json", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        cpu, sched = time.process_time(), thread_sched()
        with gc_pauses() as pauses:
            outputs = [child.communicate(timeout=1800) for child in children]
        cpu, sched = time.process_time() - cpu, busiest_thread(sched, thread_sched())
    rows = []
    for child, (out, err) in zip(children, outputs):
        if child.returncode != 0:
            raise RuntimeError(f"driver failed (exit {child.returncode}):\n{err[-3000:]}")
        row = json.loads(out.strip().splitlines()[-1])
        if row["errors"]:
            raise RuntimeError(f"driver saw {row['errors']} failed turns, first: {row['first_error']}")
        rows.append(row)
    wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
    return Driven(wall, [latency for r in rows for latency in r["latencies"]], cpu, sched, pauses)


@contextlib.contextmanager
def gc_pauses() -> Iterator[dict[int, list[float]]]:
    """Seconds of every garbage collection in this process during the block, per generation."""
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].append(time.perf_counter() - started[0])

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)


def thread_sched() -> dict[str, tuple[int, int, int]]:
    """Per thread of this process: (ns on a CPU, ns runnable but waiting for one, involuntary
    context switches), from Linux's /proc schedstat; empty elsewhere."""
    times = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/self/task/{tid}/schedstat") as file:
                    on_cpu, runnable, _ = map(int, file.read().split())
                with open(f"/proc/self/task/{tid}/status") as file:
                    status = file.read()
                preempted = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
                times[tid] = (on_cpu, runnable, preempted)
    return times


def busiest_thread(before: dict, after: dict) -> tuple[int, int, int] | None:
    """The (on-CPU ns, runnable ns, preemptions) of the thread that ran most between two
    `thread_sched()` snapshots: the server's event loop thread."""
    deltas = [tuple(a - b for a, b in zip(after[tid], before[tid])) for tid in after if tid in before]
    return max(deltas, default=None)


def report(target: str, sessions: int, driven: Driven, direct_s: float) -> dict:
    """One row. `loop_*_pct`: where the server's event-loop thread spent the wall time, on a CPU,
    runnable but waiting for a CPU (the machine is busy), or asleep (waiting for requests, a lock,
    I/O); `preempted_per_turn`: how often it was switched out while runnable."""
    wall, latencies, cpu_s, pauses = driven.wall_s, driven.latencies, driven.cpu_s, driven.gc_pauses
    breakdown = {}
    if driven.loop_sched is not None:
        on_cpu, runnable, preempted = driven.loop_sched
        breakdown = {"loop_on_cpu_pct": round(100 * on_cpu / 1e9 / wall, 1),
                     "loop_runnable_pct": round(100 * runnable / 1e9 / wall, 1),
                     "loop_asleep_pct": round(100 - 100 * (on_cpu + runnable) / 1e9 / wall, 1),
                     "preempted_per_turn": round(preempted / len(latencies), 3)}
    full = pauses[2]
    breakdown.update(gc_ms_per_turn=round(sum(map(sum, pauses.values())) * 1e3 / len(latencies), 4),
                     full_gcs=len(full), full_gc_max_ms=round(max(full, default=0.0) * 1e3, 1))
    return {"target": target, "sessions": sessions, "turns": len(latencies), **breakdown,
            "turns_per_s": round(len(latencies) / wall, 1),
            "cpu_ms_per_turn": round(cpu_s * 1e3 / len(latencies), 3),
            "turns_per_cpu_s": round(len(latencies) / cpu_s, 1) if cpu_s > 0 else None,
            "p50_ms": round(percentile(latencies, 0.5) * 1e3, 3), "p99_ms": round(percentile(latencies, 0.99) * 1e3, 3),
            "added_p50_ms": round((percentile(latencies, 0.5) - direct_s) * 1e3, 3),
            "added_p99_ms": round((percentile(latencies, 0.99) - direct_s) * 1e3, 3),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def direct_seconds(call: Callable[[], object], n: int = 2000, close: Callable[[], object] | None = None) -> float:
    """Median seconds of one direct `await call()` on an event loop (the backend alone)."""
    async def run() -> list[float]:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await call()
            times.append(time.perf_counter() - start)
        if close is not None:
            await close()
        return times
    return statistics.median(asyncio.run(run()))


@contextlib.contextmanager
def token_server(reply_ids: list[int]) -> Iterator[str]:
    """`bench/_token_server.py` in its own process; yields its base URL."""
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "_token_server.py"), "--reply-ids",
                              ",".join(map(str, reply_ids))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{json.loads(child.stdout.readline())['port']}"
    finally:
        child.stdin.close()
        child.wait(10)


def reply_token_ids(tokenizer_dir: str) -> list[int]:
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.models import load_tokenizer

    renderer = ChatTemplateRenderer(load_tokenizer(tokenizer_dir))
    return list(renderer.encode(REPLY)) + [renderer.stop_token_ids[0]]


def tiny_tokenizer_dir() -> str:
    from agentcore_rl_harness.models import prepare_model

    return str(prepare_model("tiny"))


def warm_up(base_url: str, open_session: Callable[[], str], driver_python: str) -> None:
    run_driven(base_url, open_session, sessions=4, turns=4, min_turns=64, drivers=1, driver_python=driver_python)


# --- the do-nothing baseline -----------------------------------------------------------------

def null_app_body() -> bytes:
    return json.dumps({
        "id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "policy",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": REPLY, "tool_calls": None}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 16, "total_tokens": 46}}).encode()


@contextlib.contextmanager
def null_server() -> Iterator[str]:
    """A do-nothing ASGI app (reads the body, answers a fixed completion) under uvicorn, served
    exactly as `GatewayServer` serves the gateway."""
    import uvicorn

    body = null_app_body()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    from agentcore_rl_harness.gateway.http import CoalescingHttpProtocol

    server = uvicorn.Server(uvicorn.Config(app, http=CoalescingHttpProtocol, log_level="warning",
                                           lifespan="off", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


def run_null(args: argparse.Namespace) -> list[dict]:
    counter = iter(range(10 ** 9))
    open_session = lambda: f"s{next(counter)}"  # noqa: E731
    rows = []
    with null_server() as base_url:
        warm_up(base_url, open_session, sys.executable)
        for sessions in args.sessions:
            driven = run_driven(base_url, open_session, sessions=sessions, turns=args.turns,
                                min_turns=args.min_turns, drivers=args.drivers,
                                driver_python=sys.executable)
            rows.append(report("null", sessions, driven, 0.0))
    return rows


# --- ours ------------------------------------------------------------------------------------

def run_ours(args: argparse.Namespace, tokenizer_dir: str) -> list[dict]:
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayConfig, GatewayServer
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
    direct_s = direct_seconds(lambda: sampler.sample(prompt_token_ids=(1, 2, 3), params=None))
    if args.backend == "vllm-http":
        from agentcore_rl_harness.records import SamplingParams
        from agentcore_rl_harness.samplers.vllm import VLLMSampler

        probe = VLLMSampler(args.sampler_url)
        direct_s = direct_seconds(lambda: probe.sample(prompt_token_ids=tuple(range(64)), params=SamplingParams()),
                                  n=300, close=probe.aclose)
        sampler = VLLMSampler(args.sampler_url)
    config = GatewayConfig(max_turns=None, idle_ttl_s=None, max_lifetime_s=None, gc_freeze=args.gc_freeze)
    rows = []
    with GatewayServer(sampler=sampler, renderer=renderer, model_id="policy", config=config) as server:
        opened: list[str] = []

        def open_session() -> str:
            opened.append(server.sessions.open())
            return opened[-1]

        warm_up(server.base_url, open_session, sys.executable)
        for sessions in args.sessions:
            driven = run_driven(server.base_url, open_session, sessions=sessions, turns=args.turns,
                                min_turns=args.min_turns, drivers=args.drivers,
                                driver_python=sys.executable)
            rows.append(report("ours", sessions, driven, direct_s))
            for session_id in opened:
                server.sessions.finish(session_id)
            opened.clear()
    return rows


# --- the anchor (runs in its own venv) ------------------------------------------------------

def run_anchor(args: argparse.Namespace) -> list[dict]:
    import uuid

    from agentcore_rl_toolkit.rollout_gateway import HfTemplateRenderer, RolloutGateway, ThreadedGatewayServer
    from agentcore_rl_toolkit.rollout_gateway.trajectory import TurnRecord
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    reply_ids = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    class FixedBackend:
        async def generate(self, *, prompt_ids, sampling_params, session_id=None, image_data=None, video_data=None):
            return TurnRecord(prompt_ids=list(prompt_ids), output_ids=list(reply_ids), finish_reason="stop",
                              output_log_probs=[-0.1] * len(reply_ids))

    backend = FixedBackend()
    direct_s = direct_seconds(lambda: backend.generate(prompt_ids=[1, 2, 3], sampling_params={}))
    if args.backend == "vllm-http":
        from agentcore_rl_toolkit.rollout_gateway.sampling_backends.vllm_http import VllmHttpBackend

        backend = VllmHttpBackend(args.sampler_url)
        direct_s = direct_seconds(lambda: backend.generate(prompt_ids=list(range(64)), sampling_params={}), n=300)
    gateway = RolloutGateway(backend=backend, renderer=HfTemplateRenderer(tokenizer, stop_sequences=["<|im_end|>"]),
                             tokenizer=tokenizer, adapters=["openai"])
    server = ThreadedGatewayServer(gateway, host="127.0.0.1", port=0)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    server.start()
    opened: list[str] = []

    def open_session() -> str:
        session_id = uuid.uuid4().hex
        gateway.create_session(session_id)
        opened.append(session_id)
        return session_id

    rows = []
    try:
        warm_up(server.base_url, open_session, args.driver_python)
        for sessions in args.sessions:
            driven = run_driven(server.base_url, open_session, sessions=sessions, turns=args.turns,
                                min_turns=args.min_turns, drivers=args.drivers,
                                driver_python=args.driver_python)
            rows.append(report("anchor", sessions, driven, direct_s))
            for session_id in opened:
                gateway.finish_session(session_id)
            opened.clear()
    finally:
        server.shutdown()
    return rows


# --- trace linearization --------------------------------------------------------------------

def time_linearization(turn_counts: tuple[int, ...] = (25, 50, 100), tokens_per_turn: int = 320) -> list[dict]:
    """CPU time of `TurnTree.traces()` for a linear session of N turns (320 tokens each: 32k at
    100 turns). Each prompt extends its parent's as the gateway builds it (`TokenRun` sharing one
    buffer per chain), so the session holds O(tokens), not O(turns x tokens) as it would with a
    copied tuple per turn (1.6 GB at 800 turns, whose page faults and cache misses made the
    wall-clock figure grow faster than linearly)."""
    from agentcore_rl_harness.gateway.rendering import ParsedReply
    from agentcore_rl_harness.gateway.tokens import TokenRun
    from agentcore_rl_harness.gateway.trajectory import PromptPlan, TurnTree
    from agentcore_rl_harness.records import FinishReason, SampleResult

    rows = []
    sampled, glue = tokens_per_turn * 3 // 4, tokens_per_turn // 4
    for turns in turn_counts:
        tree = TurnTree(renderer=None)
        prompt = TokenRun.of(tuple(range(200)))
        parent = None
        for index in range(turns):
            plan = PromptPlan(prompt, ({"role": "user", "content": str(index)},), "", parent, False)
            completion = tuple((index * 7 + i) % 4000 for i in range(sampled))
            turn = tree.record(plan, SampleResult(completion, (-0.5,) * sampled, FinishReason.STOP),
                               ParsedReply(content=f"reply {index}"))
            parent = turn.index
            prompt = TokenRun.of(turn.prompt_token_ids).extended(completion, tuple(range(glue)))
        best = min(_timed(tree.traces) for _ in range(5))
        (trace,) = tree.traces()
        size = len(trace.token_ids)
        # control: copying three arrays of that size, the memory hierarchy's share of any growth
        copies = min(_timed(lambda: (list(trace.token_ids), list(trace.loss_mask), list(trace.logprobs)))
                     for _ in range(5))
        rows.append({"turns": turns, "tokens": size, "linearize_ms": round(best * 1e3, 3),
                     "us_per_1k_tokens": round(best * 1e6 / (size / 1000), 1),
                     "control_copy_us_per_1k_tokens": round(copies * 1e6 / (size / 1000), 1)})
    return rows


def _timed(function) -> float:
    """CPU seconds of `function()` on this thread (wall time on a shared machine is mostly the
    other processes)."""
    start = time.thread_time()
    function()
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=["all", "null", "ours", "anchor"], default="all")
    parser.add_argument("--backend", choices=["fixed", "vllm-http"], default="fixed",
                        help="fixed: an in-process constant reply; vllm-http: both gateways sample from a fake "
                             "vLLM token server in its own process")
    parser.add_argument("--sampler-url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--turns", type=int, default=8, help="turns per session")
    parser.add_argument("--min-turns", type=int, default=3000,
                        help="turns per row at least (sessions repeat); short rows let one stall (a "
                             "full GC, a preemption) decide the row's turns/s")
    parser.add_argument("--drivers", type=int, default=1, help="driver processes")
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                        help="do not gc.freeze() after loading (both servers)")
    parser.add_argument("--gc-freeze", dest="gc_freeze", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer-dir", default=None)
    parser.add_argument("--anchor-python", default="/tmp/anchor-venv/bin/python")
    parser.add_argument("--driver-python", default=sys.executable, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=None,
                        help="load: rounds (null, ours, anchor in turn; default 1); long: repeats (default 3); medians")
    parser.add_argument("--no-linearization", action="store_true")
    parser.add_argument("--scenario", choices=["load", "long"], default="load",
                        help="load: turns/s at concurrency; long: CPU per turn as the history grows")
    parser.add_argument("--long-turns", type=int, default=200, help="long: the far turn (the near one is 10)")
    parser.add_argument("--long-window", type=int, default=5,
                        help="long: turns measured on each side of turn 10 and of the far turn")
    parser.add_argument("--baseline-src", default=None, help="long: another checkout's src to compare")
    parser.add_argument("--long-wires", nargs="+", choices=["chat", "anthropic", "responses"],
                        default=["chat", "anthropic", "responses"], help="long: the wires the agents speak")
    parser.add_argument("--long-roles", nargs="+", choices=["serve", "path", "path-fresh"], default=["serve"],
                        help="long: the gateway over HTTP (serve, per wire), the turn path alone (path, path-fresh)")
    args = parser.parse_args()
    args.repeat = args.repeat or (3 if args.scenario == "long" else 1)
    if args.scenario == "long":
        run_long(args)
        return

    if args.target == "anchor":
        for row in run_anchor(args):
            print(json.dumps(row), flush=True)
        return
    args.tokenizer_dir = args.tokenizer_dir or tiny_tokenizer_dir()
    with contextlib.ExitStack() as stack:
        if args.backend == "vllm-http":
            args.sampler_url = stack.enter_context(token_server(reply_token_ids(args.tokenizer_dir)))
            print(f"fake vLLM token server at {args.sampler_url}", flush=True)
        run_rounds(args)
    if not args.no_linearization:
        for row in time_linearization():
            print(json.dumps(row), flush=True)


def run_rounds(args: argparse.Namespace) -> None:
    rounds: dict[str, list[list[dict]]] = {}
    for round_index in range(args.repeat):
        print(f"round {round_index + 1}/{args.repeat}, load average {os.getloadavg()}", flush=True)
        if args.target in ("all", "null"):
            rounds.setdefault("null", []).append(run_null(args))
        if args.target in ("all", "ours"):
            rounds.setdefault("ours", []).append(run_ours(args, args.tokenizer_dir))
        if args.target == "all":
            rounds.setdefault("anchor", []).append(_anchor_rows(args))
        for target_rounds in rounds.values():
            for row in target_rounds[-1]:
                print(json.dumps({**row, "round": round_index + 1}), flush=True)
    rows = {target: _medians(target_rounds) for target, target_rounds in rounds.items()}
    print(f"medians over {args.repeat} round(s), each target driven in turn within a round "
          f"(backend {args.backend}):")
    _print_table(rows)


def run_long(args: argparse.Namespace) -> None:
    """CPU ms per turn near turn 10 and near turn `--long-turns` on each wire, for this checkout
    (and `--baseline-src`), every window measured side by side (`bench/_long_history.py`)."""
    sys.path.insert(0, HERE)
    import _long_history as long_history

    sources = {"this": os.path.join(os.path.dirname(HERE), "src")}
    if args.baseline_src:
        sources = {"baseline": os.path.abspath(args.baseline_src), **sources}
    repeats, near, far, half = args.repeat, 10, args.long_turns, args.long_window
    windows = {"repeats": str(repeats), "near": str(near), "far": str(far), "half": str(half)}
    print(f"load average {os.getloadavg()}", flush=True)
    samples: dict[tuple[str, str], dict[int, list[list[float]]]] = {}
    if "serve" in args.long_roles:
        cells = [(name, wire) for name in sources for wire in args.long_wires]
        servers, connections = {}, {}
        try:
            for name, src in sources.items():
                servers[name] = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "_long_history.py"), "serve",
                     "--sessions", str(repeats * len(args.long_wires) * 2)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": src})
                ready = json.loads(servers[name].stdout.readline() or "null")
                if ready is None:
                    raise SystemExit(f"the {name} gateway ({src}) did not start; see its stderr above")
                connections[name] = long_history.Connection(ready["base_url"], ready["pid"], ready["session_ids"])

            def start(cell, mark, salt):
                connection = connections[cell[0]]
                return long_history.HttpTurns(connection, connection.session_ids.pop(), cell[1],
                                             long_history.LINES, salt)

            measured = long_history.measure(cells, start, near=near, far=far, half=half, repeats=repeats)
            for (cell, mark), values in measured.items():
                samples.setdefault((cell[1], cell[0]), {})[mark] = values
        finally:
            for name, server in servers.items():
                if name in connections:
                    connections[name].close()
                finished = [json.loads(line) for line in server.communicate("finish\n", timeout=600)[0].splitlines()]
                unclean = [row for row in finished if (row["traces"], row["forks"], row["drift_events"]) != (1, 0, 0)]
                print(f"{name}: {len(finished)} sessions, up to {max((r['tokens'] for r in finished), default=0)} tokens; "
                      + (f"NOT one clean trace each: {unclean}" if unclean else "each one trace, 0 forks, 0 drift"),
                      flush=True)
    for role in (role for role in args.long_roles if role != "serve"):
        for name, src in sources.items():
            done = subprocess.run([sys.executable, os.path.join(HERE, "_long_history.py"), role,
                                   *(f"--{key}={value}" for key, value in windows.items())],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}, timeout=7200)
            if done.returncode != 0:
                raise SystemExit(f"{role} {name} failed: {done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            samples[(role, name)] = {int(mark): values for mark, values in row["cpu_ms"].items()}
    print(f"CPU ms per turn: median over {repeats} repeats x turns n-{half}..n+{half}, windows measured side by "
          "side (serve: the gateway process, per wire; path: the turn path alone, one process, "
          "path-fresh: every message translated anew; bench/_long_history.py)")
    print(f"{'wire':<22} | turn {near:>3} | turn {far:>3} | turn {far}/turn {near} | per repeat")
    for (what, name), by_mark in samples.items():
        at = {mark: statistics.median(ms for window in by_mark[mark] for ms in window) for mark in (near, far)}
        per_repeat = " ".join(f"{statistics.median(f) / statistics.median(n):.2f}"
                              for n, f in zip(by_mark[near], by_mark[far]))
        label = what if len(sources) == 1 else f"{what} ({name})"
        print(f"{label:<22} | {at[near]:>8.2f} | {at[far]:>8.2f} | {at[far] / at[near]:>16.2f}x | {per_repeat}",
              flush=True)
    print(f"load average {os.getloadavg()}")
    if not args.no_linearization:
        print("trace linearization (CPU, best of 5), this checkout:")
        for row in time_linearization((100, 200, 400, 800)):
            print(json.dumps(row), flush=True)


def _medians(target_rounds: list[list[dict]]) -> list[dict]:
    """Per concurrency, the median of each number over the rounds (rounds that ran)."""
    by_sessions: dict[int, list[dict]] = {}
    for round_rows in target_rounds:
        for row in round_rows:
            by_sessions.setdefault(row["sessions"], []).append(row)
    medians = []
    for sessions, rows in sorted(by_sessions.items()):
        median = dict(rows[0])
        for key, value in rows[0].items():
            if isinstance(value, (int, float)) and key not in ("sessions", "turns", "round"):
                median[key] = round(statistics.median(r[key] for r in rows if r.get(key) is not None), 3)
        medians.append(median)
    return medians


def _print_table(rows: dict[str, list[dict]]) -> None:
    by = {target: {row["sessions"]: row for row in target_rows} for target, target_rows in rows.items()}
    print("sessions | turns/s null  ours  anchor | ours/anchor | added p50 ms ours anchor | "
          "added p99 ms ours anchor | cpu ms/turn ours anchor | cpu ratio | loop on-cpu/runnable % ours "
          "anchor | load")
    for sessions in sorted({s for target_rows in by.values() for s in target_rows}):
        null, ours, anchor = (by.get(t, {}).get(sessions) for t in ("null", "ours", "anchor"))
        get = lambda row, key: f"{row[key]:.1f}" if row else "-"  # noqa: E731
        getf = lambda row, key: f"{row[key]:.2f}" if row else "-"  # noqa: E731
        loop = lambda row: f"{row['loop_on_cpu_pct']:.0f}/{row['loop_runnable_pct']:.0f}" \
            if row and "loop_on_cpu_pct" in row else "-"  # noqa: E731
        ratio = f"{ours['turns_per_s'] / anchor['turns_per_s']:.2f}x" if ours and anchor else "-"
        load = max((r["loadavg_1m"] for r in (null, ours, anchor) if r), default=0.0)
        cpu_ratio = f"{anchor['cpu_ms_per_turn'] / ours['cpu_ms_per_turn']:.2f}x" if ours and anchor else "-"
        print(f"{sessions:>8} | {get(null, 'turns_per_s'):>10} {get(ours, 'turns_per_s'):>6} "
              f"{get(anchor, 'turns_per_s'):>7} | {ratio:>11} | {getf(ours, 'added_p50_ms'):>13} "
              f"{getf(anchor, 'added_p50_ms'):>6} | {getf(ours, 'added_p99_ms'):>13} "
              f"{getf(anchor, 'added_p99_ms'):>6} | {getf(ours, 'cpu_ms_per_turn'):>16} "
              f"{getf(anchor, 'cpu_ms_per_turn'):>6} | {cpu_ratio:>9} | {loop(ours):>28} {loop(anchor):>7} "
              f"| {load:.2f}", flush=True)


def _anchor_rows(args: argparse.Namespace) -> list[dict]:
    if not os.path.exists(args.anchor_python):
        print(f"anchor skipped: {args.anchor_python} not found (python3 -m venv /tmp/anchor-venv && "
              "/tmp/anchor-venv/bin/pip install 'agentcore-rl-toolkit[gateway]==0.2.0')", flush=True)
        return []
    command = [args.anchor_python, os.path.abspath(__file__), "--target", "anchor", "--tokenizer-dir",
               args.tokenizer_dir, "--turns", str(args.turns), "--min-turns", str(args.min_turns),
               "--drivers", str(args.drivers), "--driver-python", sys.executable, "--backend", args.backend,
               *(["--sampler-url", args.sampler_url] if args.sampler_url else []),
               "--sessions", *map(str, args.sessions), *([] if args.gc_freeze else ["--no-gc-freeze"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        print(f"anchor failed (exit {done.returncode}):\n{done.stderr[-3000:]}", flush=True)
        return []
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


if __name__ == "__main__":
    main()
