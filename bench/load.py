"""Load and soak: many concurrent multi-turn sessions on all three wires through the real gateway.

Three processes besides this one: a fake token server (vLLM's token-in/token-out endpoint; it
answers each session's n-th sample with the text "<session tail> turn <n>", so a reply carries
the identity of the session and turn it was sampled for), the standalone gateway in front of it
(`agentcore-rl gateway --sampler vllm`), and `--drivers` client processes. Each session is opened
with the admin API, runs `--turns` turns on one wire (chat completions, responses, messages in
turn, the history growing every turn), and is finished with the admin API. Counted:

  lost        a turn without a 200, or a finished session with fewer recorded turns than it ran
  crosswired  a 200 whose reply is not the one sampled for that session and turn
  p50 / p99   per-turn latency as the clients see it
  rss         the gateway process's VmRSS before the load and after it (and every few seconds)

`--soak S` keeps `--sessions` concurrent workers opening, running and finishing sessions for S
seconds, sampling the gateway's RSS as it goes (flat = no leak). Clients are httpx with its
default keep-alive expiry (5 s); the gateway's idle timeout is 75 s, so the server never closes
a connection a client is about to reuse (the close race that lost 1 request in 6,144 with
uvicorn's 5 s default).

Run:  python bench/load.py [--sessions 1024] [--turns 20] [--drivers 2] [--soak 0]
Soak: python bench/load.py --sessions 128 --turns 4 --soak 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
WIRES = ("chat", "responses", "messages")
TOKEN = "load-bench-admin-token"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


# -- the fake token server ------------------------------------------------------------------------

def serve_tokens(port_file: str, model: str) -> None:
    """vLLM's `POST /inference/v1/generate` (JSON answers), replies keyed by `X-Session-Id`."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from agentcore_rl_harness.models import load_tokenizer, resolve_model

    tokenizer = load_tokenizer(resolve_model(model))
    counts: dict[str, int] = {}

    async def generate(request: Request) -> JSONResponse:
        body = await request.json()
        session = request.headers.get("x-session-id", "?")
        counts[session] = counts.get(session, 0) + 1
        stops = body["sampling_params"]["stop_token_ids"]
        ids = tokenizer.encode(f"{session[-10:]} turn {counts[session]}", add_special_tokens=False)
        ids = ids[:body["sampling_params"]["max_tokens"] - 1] + stops[:1]
        return JSONResponse({"choices": [{"token_ids": ids, "finish_reason": "stop",
                                          "logprobs": {"content": [{"logprob": -0.5} for _ in ids]}}]})

    app = Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False,
                            timeout_keep_alive=75)
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        with open(port_file + ".tmp", "w") as out:
            out.write(str(port))
        os.replace(port_file + ".tmp", port_file)

    threading.Thread(target=announce, daemon=True).start()
    server.run()


# -- the clients ----------------------------------------------------------------------------------

def body_for(wire: str, history: list[dict]) -> dict:
    if wire == "chat":
        return {"model": "m", "messages": history}
    if wire == "responses":
        items = [{"type": "message", "role": m["role"], "content": m["content"]} for m in history[1:]]
        return {"model": "m", "instructions": history[0]["content"], "input": items}
    return {"model": "m", "max_tokens": 32, "system": history[0]["content"], "messages": history[1:]}


def reply_of(wire: str, answer: dict) -> str:
    if wire == "chat":
        return answer["choices"][0]["message"]["content"]
    if wire == "responses":
        return "".join(part["text"] for item in answer["output"] if item["type"] == "message"
                       for part in item["content"])
    return "".join(block["text"] for block in answer["content"] if block["type"] == "text")


async def run_session(client, root: str, wire: str, turns: int, tally: dict) -> None:
    opened = await client.post(f"{root}/admin/sessions", json={}, headers={"X-Admin-Token": TOKEN})
    session_id = opened.json()["session_id"]
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[wire]
    headers = {"Authorization": f"Bearer {session_id}"}
    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count with me."}]
    ran = 0
    for turn in range(1, turns + 1):
        started = time.perf_counter()
        try:
            response = await client.post(root + path, json=body_for(wire, history), headers=headers)
        except Exception as exc:  # a transport error is a lost turn; keep its kind
            tally["lost"] += 1
            tally["errors"].append(f"{type(exc).__name__}: {exc}"[:200])
            break
        tally["latencies"].append(time.perf_counter() - started)
        if response.status_code != 200:
            tally["lost"] += 1
            tally["errors"].append(f"{response.status_code}: {response.text[:200]}")
            break
        ran += 1
        text = reply_of(wire, response.json())
        if text != f"{session_id[-10:]} turn {turn}":
            tally["crosswired"] += 1
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And {turn + 1}?"}]
    finished = await client.post(f"{root}/admin/sessions/{session_id}/finish", headers={"X-Admin-Token": TOKEN})
    recorded = finished.json().get("turns", 0) if finished.status_code == 200 else 0
    tally["lost"] += max(0, ran - recorded)
    tally["turns"] += ran
    tally["sessions"] += 1


async def watch(workers: list, tally: dict, offset: int, every_s: float = 30.0) -> None:
    """Progress on stderr every `every_s`; after two periods without a finished turn, the stacks of
    the workers still running (a stall shows where it waits instead of printing nothing)."""
    last, still, shown = -1, 0, 0
    while True:
        await asyncio.sleep(every_s)
        for error in tally["errors"][shown:]:
            print(f"driver {offset}: lost: {error}", file=sys.stderr, flush=True)
        shown = len(tally["errors"])
        pending = [task for task in workers if not task.done()]
        turns = len(tally["latencies"])
        print(f"driver {offset}: {turns} turns, {tally['sessions']} sessions done, "
              f"{len(pending)} workers running, {tally['lost']} lost", file=sys.stderr, flush=True)
        still = still + 1 if turns == last else 0
        last = turns
        if still == 2:
            for task in pending[:3]:
                task.print_stack(file=sys.stderr)


async def drive(root: str, sessions: int, turns: int, offset: int, soak_s: float) -> dict:
    import httpx

    tally = {"lost": 0, "crosswired": 0, "turns": 0, "sessions": 0, "latencies": [], "errors": []}
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:
        deadline = time.monotonic() + soak_s

        async def worker(index: int) -> None:
            rounds = 0
            while True:
                wire = WIRES[(offset + index + rounds) % len(WIRES)]
                await run_session(client, root, wire, turns, tally)
                rounds += 1
                if time.monotonic() >= deadline:
                    return

        workers = [asyncio.ensure_future(worker(index)) for index in range(sessions)]
        watchdog = asyncio.ensure_future(watch(workers, tally, offset))
        await asyncio.gather(*workers)
        watchdog.cancel()
    tally["errors"] = tally["errors"][:5]
    return tally


# -- orchestration --------------------------------------------------------------------------------

def start_gateway(model: str, sampler_url: str) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-c", "from agentcore_rl_harness.cli import main; raise SystemExit(main())", "gateway",
               "--model", model, "--sampler", "vllm", "--sampler-url", sampler_url, "--admin-token", TOKEN]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        found = re.search(r"gateway: (\S+)", line)
        if found:
            return process, found.group(1).removesuffix("/v1")
    raise RuntimeError(f"the gateway exited with {process.wait()} before printing its URL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1024, help="concurrent sessions (all drivers)")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--drivers", type=int, default=2, help="client processes")
    parser.add_argument("--soak", type=float, default=0.0, help="seconds of continuous open/run/finish")
    parser.add_argument("--model", default="tiny", help="tokenizer + template of the gateway")
    parser.add_argument("--rss-every", type=float, default=5.0)
    parser.add_argument("--serve-tokens", help=argparse.SUPPRESS)
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_tokens:
        return serve_tokens(args.serve_tokens, args.model)
    if args.drive:
        root, sessions, offset, out_path = json.loads(args.drive)
        result = asyncio.run(drive(root, sessions, args.turns, offset, args.soak))
        with open(out_path, "w") as out:  # a file, not stdout: tens of thousands of latencies
            json.dump(result, out)        # overflow a pipe nobody reads until the driver exits
        return None

    with tempfile.TemporaryDirectory() as scratch:
        port_file = os.path.join(scratch, "port")
        tokens = subprocess.Popen([sys.executable, __file__, "--serve-tokens", port_file, "--model", args.model])
        gateway = None
        try:
            while not os.path.exists(port_file):
                if tokens.poll() is not None:
                    raise RuntimeError("the fake token server exited")
                time.sleep(0.05)
            gateway, root = start_gateway(args.model, f"http://127.0.0.1:{open(port_file).read()}")
            time.sleep(1.0)
            rss_before = rss_kib(gateway.pid)
            samples: list[tuple[float, int]] = []
            started = time.monotonic()
            share = [args.sessions // args.drivers + (i < args.sessions % args.drivers) for i in range(args.drivers)]
            outs = [os.path.join(scratch, f"driver-{i}.json") for i in range(args.drivers)]
            drivers = [subprocess.Popen(
                [sys.executable, __file__, "--turns", str(args.turns), "--soak", str(args.soak),
                 "--drive", json.dumps([root, n, sum(share[:i]), outs[i]])])
                for i, n in enumerate(share)]
            while any(driver.poll() is None for driver in drivers):
                samples.append((time.monotonic() - started, rss_kib(gateway.pid)))
                time.sleep(args.rss_every)
            elapsed = time.monotonic() - started
            failed = [driver.returncode for driver in drivers if driver.returncode != 0]
            if failed:
                raise RuntimeError(f"a driver exited with {failed[0]}; its stderr is above")
            results = [json.load(open(path)) for path in outs]
            time.sleep(1.0)
            rss_after = rss_kib(gateway.pid)
        finally:
            for process in (gateway, tokens):
                if process is not None:
                    process.terminate()
                    process.wait(timeout=30)
    latencies = [value for result in results for value in result["latencies"]]
    total = {key: sum(result[key] for result in results) for key in ("lost", "crosswired", "turns", "sessions")}
    report = {
        "sessions_concurrent": args.sessions, "turns_per_session": args.turns, "soak_s": args.soak,
        **total, "turns_per_s": round(total["turns"] / elapsed, 1), "elapsed_s": round(elapsed, 1),
        "p50_ms": round(1000 * percentile(latencies, 0.50), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "rss_before_mib": round(rss_before / 1024, 1), "rss_after_mib": round(rss_after / 1024, 1),
        "rss_samples_mib": [round(kib / 1024, 1) for _, kib in samples[:: max(1, len(samples) // 12)]],
        "errors": [error for result in results for error in result["errors"]][:5],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if len(samples) >= 4:  # soak: growth between the end of the first quarter and the end
        quarter = samples[len(samples) // 4][1]
        report["rss_growth_after_warmup_mib"] = round((samples[-1][1] - quarter) / 1024, 1)
        report["median_rss_mib"] = round(statistics.median(kib for _, kib in samples) / 1024, 1)
    print(json.dumps(report, indent=1))
    if total["lost"] or total["crosswired"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
