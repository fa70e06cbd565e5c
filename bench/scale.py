"""Scale: thousands of concurrent simulated AgentCore sessions through one harness process, then
the same load over 4 harness processes sharing the Ray limiter.

Processes (all on loopback):
  token server  `bench/_token_server.py`: the fake remote sampler (vLLM's token-in/token-out API)
  ACR side      the data-plane stub of the ACR tests (tests/runtimes/acr_stub.py) with a cold
                start injected before each session's first invoke (uniform 1-5 s), in front of
                a simulated agent (aiohttp client) that runs `--turns` chat turns against the
                session's gateway with a think time between turns (uniform 1-3 s); the stub
                and the agent each run as `--acr-procs` processes sharing a port (SO_REUSEPORT)
                so that the simulated AWS side is not what tops out first
  harness       `--role harness`: what a harness process holds for `runtime=agentcore`: the
                gateway (`GatewayServer`, tiny model's tokenizer and template) sampling through
                `VLLMSampler`, and an `AgentCoreRuntime` (boto3 -> the stub) whose quotas sit in
                the configured limiter; it starts all its sessions at once and reports
The harness process is what is measured: its peak RSS over its RSS before, per live session, its peak thread count, its CPU seconds per rollout, the
makespan against the slowest possible session, and the agents' turn latency p50/p99 (as the
simulated agent saw its gateway). A process tops out where its CPU share reaches a core (the
gateway and boto3 share one GIL) and the turn latency and makespan grow with the load.

The ARN's quota is set high (`--tps 1000`, the stub enforces none) so that the limiter paces
without being the bottleneck; with `--procs 4` the 4 processes share it and the live cap
through one Ray actor (a local Ray cluster started here, listening on 127.0.0.1 only).

Run:  python bench/scale.py [--levels 250 500 1000 2000] [--procs 4] [--turns 4]
Prints one JSON line per run, then a markdown table (bench/RESULTS.md's).
"""

from __future__ import annotations

from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/scale-Ab12Cd34Ef"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2", "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true",
}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def proc_status(pid: int | str = "self") -> dict[str, int]:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "Threads"):
                fields[name] = int(value.split()[0])
    return fields


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- the ACR side ---------------------------------------------------------------------------------

def agent_app(seed: int):
    """The simulated agent: `turns` chat turns against its gateway, thinking between them."""
    import aiohttp
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    rng = random.Random(seed)
    clients: list[aiohttp.ClientSession] = []  # made on the server's loop

    async def invocations(request: Request) -> JSONResponse:
        if not clients:
            clients.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                 timeout=aiohttp.ClientTimeout(total=600)))
        payload = await request.json()
        rollout = payload["_rollout"]
        url = rollout["base_url"] + "/chat/completions"
        headers = {"authorization": f"Bearer {rollout['api_key']}"}
        messages = [{"role": "user", "content": "What is six times seven?"}]
        latencies = []
        for turn in range(payload["turns"]):
            started = time.monotonic()
            async with clients[0].post(url, headers=headers, json={
                    "model": rollout["model_id"], "messages": messages, "max_tokens": 32}) as answer:
                body = await answer.json(content_type=None)
            latencies.append(time.monotonic() - started)
            if answer.status != 200:
                return JSONResponse({"error": str(body)[:300]}, status_code=500)
            reply = body["choices"][0]["message"]["content"]
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": f"Turn {turn}: and then?"}]
            await asyncio.sleep(rng.uniform(*payload["think_s"]))
        return JSONResponse({"turn_latencies": latencies})

    async def ping(request: Request) -> JSONResponse:
        return JSONResponse({"status": "Healthy", "time_of_last_update": int(time.time())})

    return Starlette(routes=[Route("/invocations", invocations, methods=["POST"]),
                             Route("/ping", ping, methods=["GET"])])


class ColdStarts:
    """ASGI middleware: a session's first invoke waits a uniform `low..high` s (its microVM)."""

    def __init__(self, app, low: float, high: float, seed: int) -> None:
        self.app, self.low, self.high = app, low, high
        self.rng = random.Random(seed)
        self.started: set[bytes] = set()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/invocations"):
            session = dict(scope["headers"]).get(b"x-amzn-bedrock-agentcore-runtime-session-id")
            if session not in self.started:
                self.started.add(session)
                await asyncio.sleep(self.rng.uniform(self.low, self.high))
        await self.app(scope, receive, send)


class AiohttpForwarder:
    """What `DataPlaneStub` needs of its httpx client (`post` -> status_code, content, text,
    headers), on aiohttp: httpx's pool slowed the stub down with thousands of connections."""

    def __init__(self) -> None:
        self.session = None

    async def post(self, url: str, *, content: bytes, headers: dict[str, str]):
        import types

        import aiohttp

        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                 timeout=aiohttp.ClientTimeout(total=None))
        async with self.session.post(url, data=content, headers=headers) as answer:
            body = await answer.read()
        return types.SimpleNamespace(status_code=answer.status, content=body, headers=answer.headers,
                                     text=body.decode(errors="replace"))


def shared_port_socket(port: int = 0):
    """A loopback socket with SO_REUSEPORT: processes binding one port share its connections."""
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def run_acr_side(args: argparse.Namespace) -> None:
    """One process of the ACR side, serving on the shared `--port`: the agent or the stub."""
    import uvicorn

    if args.role == "acr-agent":
        app = agent_app(args.seed + os.getpid())
    else:
        stub = _load(HERE.parent / "tests" / "runtimes" / "acr_stub.py")
        plane = stub.DataPlaneStub(agents={ARN: args.agent_url})
        plane._client = AiohttpForwarder()
        app = ColdStarts(plane.app, args.cold_low, args.cold_high, args.seed + os.getpid())
    # Keep-alive outlives the clients' (aiohttp 15 s, urllib3 until reuse): uvicorn's 5 s default
    # closed connections as they were reused, failing 69 of 2,000 sessions in one run.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           access_log=False, backlog=4096, timeout_keep_alive=75))
    threading.Thread(target=lambda: (sys.stdin.read(), setattr(server, "should_exit", True)),
                     daemon=True).start()  # until the parent closes our stdin
    server.run(sockets=[shared_port_socket(args.port)])


# -- one harness process --------------------------------------------------------------------------

class Sampler(threading.Thread):
    """Samples this process's RSS, threads and live sessions every 0.2 s."""

    def __init__(self, live) -> None:
        super().__init__(daemon=True)
        self.live, self.samples, self.stopping = live, [], threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            status = proc_status()
            self.samples.append((self.live(), status["VmRSS"], status["Threads"]))


async def run_harness(args: argparse.Namespace) -> dict:
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayConfig, GatewayServer
    from agentcore_rl_harness.models import load_tokenizer
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
    from agentcore_rl_harness.runtimes.base import AgentRef
    from agentcore_rl_harness.runtimes.limits import LimiterSettings, build_limiter
    from agentcore_rl_harness.samplers.vllm import VLLMSampler
    from agentcore_rl_harness.tasks import rollout_block

    renderer = ChatTemplateRenderer(load_tokenizer(args.tokenizer))
    gateway = GatewayServer(
        sampler=VLLMSampler(args.sampler_url), renderer=renderer, model_id="policy",
        config=GatewayConfig(max_turns=None, idle_ttl_s=None, max_lifetime_s=None, gc_freeze=True),
    ).start()
    limiter = build_limiter(
        LimiterSettings(kind=args.limiter, max_live_sessions=args.max_live,
                        ray_address=args.ray_address, name=args.limiter_name),
        tps_per_arn={ARN: args.tps}, concurrency=args.sessions,
    )
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=args.endpoint, concurrency=args.sessions, read_timeout_s=900), limiter=limiter)
    sampling = SamplingParams(max_tokens=32)

    async def rollout(index: int) -> tuple[str, int, list[float]]:
        session_id = "arl-" + secrets.token_hex(20)
        gateway.sessions.open(session_id=session_id, sampling=sampling)
        payload = {"turns": args.turns, "think_s": [args.think_low, args.think_high],
                   "_rollout": rollout_block(base_url=gateway.base_url, model_id="policy",
                                             session_id=session_id, sampling=sampling)}
        outcome = await runtime.run_session(
            agent=AgentRef(task="scale", agent=None, phase="eval"), session_id=session_id,
            payload=payload, timeout_s=900)
        finished = gateway.sessions.finish(session_id)
        latencies = (outcome.result or {}).get("turn_latencies", [])
        return outcome.status.value, finished.turns, latencies

    before = proc_status()
    sampler = Sampler(lambda: runtime.live_sessions)
    sampler.start()
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the parent's "go": every process at once
    cpu_started, started = time.process_time(), time.monotonic()
    results = await asyncio.gather(*(rollout(i) for i in range(args.sessions)))
    makespan, cpu_s = time.monotonic() - started, time.process_time() - cpu_started
    sampler.stopping.set()
    await runtime.aclose()
    gateway.stop()
    peak_live = max(sample[0] for sample in sampler.samples)
    rss_at_peak = max(sample[1] for sample in sampler.samples)
    latencies = [latency for _, _, turn_latencies in results for latency in turn_latencies]
    statuses: dict[str, int] = {}
    for status, _, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "sessions": args.sessions, "statuses": statuses, "makespan_s": makespan, "cpu_s": cpu_s,
        "turns": sum(turns for _, turns, _ in results), "peak_live": peak_live,
        "rss_before_kib": before["VmRSS"], "rss_at_peak_kib": rss_at_peak,
        "threads_before": before["Threads"], "peak_threads": max(s[2] for s in sampler.samples),
        "turn_p50_s": percentile(latencies, 0.5), "turn_p99_s": percentile(latencies, 0.99),
        "limiter": args.limiter,
    }


# -- the parent -----------------------------------------------------------------------------------

@contextlib.contextmanager
def acr_side(args: argparse.Namespace) -> Iterator[tuple[str, list[int]]]:
    """`--acr-procs` agent processes on one port, as many stub processes on another."""
    import httpx

    reserved = [shared_port_socket(), shared_port_socket()]  # bound, not listening: ports held
    agent_port, stub_port = (sock.getsockname()[1] for sock in reserved)
    common = ["--seed", str(args.seed), "--cold-low", str(args.cold_low),
              "--cold-high", str(args.cold_high)]
    children = []
    for _ in range(args.acr_procs):
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--role", "acr-agent", "--port", str(agent_port), *common],
            stdin=subprocess.PIPE, text=True))
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--role", "acr-stub", "--port", str(stub_port),
             "--agent-url", f"http://127.0.0.1:{agent_port}", *common],
            stdin=subprocess.PIPE, text=True, env={**os.environ, **AWS_ENV}))
    endpoint = f"http://127.0.0.1:{stub_port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # every process accepts: a ping through the stub's port reaches an agent's
            try:
                httpx.get(f"{endpoint}/ping", timeout=2)  # the stub answers 404: it listens
                if httpx.get(f"http://127.0.0.1:{agent_port}/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or any(child.poll() is not None for child in children):
                raise RuntimeError("the ACR side did not start")
            time.sleep(0.5)
        time.sleep(3)  # the other processes of each port bind too
        yield endpoint, [child.pid for child in children]
    finally:
        for child in children:
            child.stdin.close()
        for child in children:
            child.wait(30)
        for sock in reserved:
            sock.close()


def run_processes(args: argparse.Namespace, acr: tuple[str, list[int]], sampler_url: str,
                  tokenizer: str, sessions: int, procs: int, limiter: str,
                  ray_address: str | None) -> list[dict]:
    endpoint, acr_pids = acr
    name = f"scale-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, __file__, "--role", "harness", "--endpoint", endpoint,
            "--sampler-url", sampler_url, "--tokenizer", tokenizer, "--sessions",
            str(sessions // procs), "--limiter", limiter, "--limiter-name", name,
            "--tps", str(args.tps), "--max-live", str(sessions), "--turns", str(args.turns),
            "--think-low", str(args.think_low), "--think-high", str(args.think_high)]
    if ray_address:
        argv += ["--ray-address", ray_address]
    children = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, **AWS_ENV}) for _ in range(procs)]
    for child in children:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"a harness process died before it was ready (exit {child.wait()})")
    acr_cpu, started = sum(map(cpu_seconds, acr_pids)), time.monotonic()
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    results = []
    for child in children:
        out, _ = child.communicate(timeout=1800)
        if child.returncode != 0:
            raise RuntimeError(f"a harness process failed with exit status {child.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    acr_cpu = sum(map(cpu_seconds, acr_pids)) - acr_cpu
    results[0]["acr_cores"] = acr_cpu / (time.monotonic() - started)
    return results


def summarise(runs: list[dict], procs: int, args: argparse.Namespace) -> dict:
    sessions = sum(run["sessions"] for run in runs)
    completed = sum(run["statuses"].get("completed", 0) for run in runs)
    rss_per_live = statistics.fmean(
        (run["rss_at_peak_kib"] - run["rss_before_kib"]) / max(run["peak_live"], 1) for run in runs)
    makespan = max(run["makespan_s"] for run in runs)
    cpu_s = sum(run["cpu_s"] for run in runs)
    slowest = args.cold_high + args.turns * args.think_high
    return {
        "sessions": sessions, "procs": procs, "limiter": runs[0]["limiter"],
        "completed": completed, "peak_live": sum(run["peak_live"] for run in runs),
        "kib_per_live_session": round(rss_per_live, 1),
        "peak_threads_per_proc": max(run["peak_threads"] for run in runs),
        "cpu_ms_per_rollout": round(1000 * cpu_s / max(completed, 1), 2),
        "cores_busy_per_proc": round(max(run["cpu_s"] / run["makespan_s"] for run in runs), 2),
        "makespan_s": round(makespan, 1), "slowest_possible_s": slowest,
        "rollouts_per_s": round(completed / makespan, 1),
        "turn_p50_ms": round(1000 * statistics.median(run["turn_p50_s"] for run in runs), 1),
        "turn_p99_ms": round(1000 * max(run["turn_p99_s"] for run in runs), 1),
        "acr_side_cores": round(runs[0]["acr_cores"], 2), "load_1m": os.getloadavg()[0],
    }


def table(rows: list[dict]) -> str:
    header = ("| sessions | procs | limiter | completed | KiB / live session | threads / proc | "
              "CPU ms / rollout | cores / proc | makespan s (slowest session) | rollouts/s | "
              "turn p50 / p99 ms | ACR side cores | load |")
    lines = [header, "|" + "---|" * 13]
    for row in rows:
        lines.append(
            f"| {row['sessions']} | {row['procs']} | {row['limiter']} | {row['completed']} | "
            f"{row['kib_per_live_session']} | {row['peak_threads_per_proc']} | "
            f"{row['cpu_ms_per_rollout']} | {row['cores_busy_per_proc']} | {row['makespan_s']} "
            f"({row['slowest_possible_s']:g}) | {row['rollouts_per_s']} | {row['turn_p50_ms']} / "
            f"{row['turn_p99_ms']} | {row['acr_side_cores']} | {row['load_1m']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("parent", "acr-agent", "acr-stub", "harness"),
                        default="parent")
    parser.add_argument("--acr-procs", type=int, default=2,
                        help="processes of the simulated agent, and as many of the stub")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--agent-url")
    parser.add_argument("--levels", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--procs", type=int, default=4, help="harness processes of the Ray run")
    parser.add_argument("--ray-sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--think-low", type=float, default=1.0)
    parser.add_argument("--think-high", type=float, default=3.0)
    parser.add_argument("--cold-low", type=float, default=1.0)
    parser.add_argument("--cold-high", type=float, default=5.0)
    parser.add_argument("--tps", type=float, default=1000.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sessions", type=int, default=0)
    parser.add_argument("--endpoint")
    parser.add_argument("--sampler-url")
    parser.add_argument("--tokenizer")
    parser.add_argument("--limiter", default="local")
    parser.add_argument("--limiter-name", default="agentcore-rl-limiter")
    parser.add_argument("--ray-address")
    parser.add_argument("--max-live", type=int)
    args = parser.parse_args()
    if args.role in ("acr-agent", "acr-stub"):
        run_acr_side(args)
        return
    if args.role == "harness":
        print(json.dumps(asyncio.run(run_harness(args))), flush=True)
        return
    sys.path.insert(0, str(HERE))
    from gateway import reply_token_ids, tiny_tokenizer_dir, token_server

    tokenizer = tiny_tokenizer_dir()
    rows = []
    with token_server(reply_token_ids(tokenizer)) as sampler_url, acr_side(args) as acr:
        for sessions in args.levels:
            runs = run_processes(args, acr, sampler_url, tokenizer, sessions, 1, "local", None)
            rows.append(summarise(runs, 1, args))
            print(json.dumps(rows[-1]), flush=True)
        if args.procs > 1:
            import ray

            from agentcore_rl_harness.runtimes.ray_loopback import start_local

            address = start_local(num_cpus=1, log_to_driver=False)  # on 127.0.0.1 only
            runs = run_processes(args, acr, sampler_url, tokenizer, args.ray_sessions,
                                 args.procs, "ray", address)
            rows.append(summarise(runs, args.procs, args))
            print(json.dumps(rows[-1]), flush=True)
            ray.shutdown()
    print(table(rows))


if __name__ == "__main__":
    main()
