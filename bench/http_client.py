"""Which HTTP client for the remote samplers: ours vs aiohttp vs httpx on the gateway's sampler path.

`concurrency` tasks each POST vLLM token-in requests (`stream: false`, a 16-token answer) back to
back to `bench/_token_server.py` in its own process, on one uvloop event loop, as the gateway's
sampler would. Per client: requests/s and this process's CPU ms per request (the client's own
cost, what the gateway pays per turn on top of its turn). Clients:

  ours           the samplers' `HttpClient` (`samplers/_pool.py`: keep-alive pool, httptools parser)
  aiohttp        a pooled aiohttp ClientSession (TCPConnector limit 4096): what the samplers used before
  httpx-tuned    httpx.AsyncClient, HTTP/1.1, pool limits raised to 4096 connections, trust_env off
  httpx-default  httpx.AsyncClient(timeout=600): what the samplers used before

Run:  python bench/http_client.py [--concurrency 1 64 128] [--requests 4000] [--repeat 3]
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

import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
REPLY_IDS = list(range(100, 116))


def start_server() -> tuple[subprocess.Popen, str]:
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "_token_server.py"), "--reply-ids",
                              ",".join(map(str, REPLY_IDS))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = json.loads(child.stdout.readline())["port"]
    return child, f"http://127.0.0.1:{port}"


def body(index: int) -> dict:
    return {"request_id": f"r{index}", "token_ids": list(range(200)), "stream": False,
            "sampling_params": {"n": 1, "temperature": 1.0, "max_tokens": 64, "logprobs": 0}}


async def run_ours(url: str, concurrency: int, total: int) -> None:
    from agentcore_rl_harness.samplers._http import HttpClient

    client = HttpClient(engine="vLLM")
    await _drive(lambda i: client.post(url, body(i)), concurrency, total)
    await client.aclose()


async def run_aiohttp(url: str, concurrency: int, total: int) -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=4096, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=600, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def call(index: int) -> object:
            async with session.post(url, data=orjson.dumps(body(index)),
                                    headers={"Content-Type": "application/json"}) as response:
                return orjson.loads(await response.read())
        await _drive(call, concurrency, total)


async def run_httpx(url: str, concurrency: int, total: int, tuned: bool) -> None:
    import httpx

    if tuned:
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=4096)
        client = httpx.AsyncClient(timeout=600, limits=limits, http1=True, http2=False, trust_env=False)
    else:
        client = httpx.AsyncClient(timeout=600)

    async def call(index: int) -> object:
        response = await client.post(url, content=orjson.dumps(body(index)),
                                     headers={"content-type": "application/json"})
        return orjson.loads(response.content)
    await _drive(call, concurrency, total)
    await client.aclose()


async def _drive(call, concurrency: int, total: int) -> None:
    per_task = max(1, total // concurrency)

    async def worker(start: int) -> None:
        for index in range(start, start + per_task):
            await call(index)
    await asyncio.gather(*(worker(i * per_task) for i in range(concurrency)))


def measure(name: str, url: str, concurrency: int, total: int) -> dict:
    import uvloop

    runners = {"ours": lambda: run_ours(url, concurrency, total),
               "aiohttp": lambda: run_aiohttp(url, concurrency, total),
               "httpx-tuned": lambda: run_httpx(url, concurrency, total, True),
               "httpx-default": lambda: run_httpx(url, concurrency, total, False)}
    uvloop.run(runners[name]())  # warm: connections, imports
    cpu, wall = time.process_time(), time.perf_counter()
    uvloop.run(runners[name]())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = (total // concurrency) * concurrency
    return {"client": name, "concurrency": concurrency, "requests": done, "requests_per_s": round(done / wall, 1),
            "cpu_ms_per_request": round(cpu * 1e3 / done, 4), "loadavg_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 128])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", nargs="+", default=["ours", "aiohttp", "httpx-tuned", "httpx-default"])
    args = parser.parse_args()
    child, url = start_server()
    rows: dict[tuple[str, int], list[dict]] = {}
    try:
        for _ in range(args.repeat):
            for concurrency in args.concurrency:
                for name in args.clients:
                    row = measure(name, url + "/inference/v1/generate", concurrency, args.requests)
                    rows.setdefault((name, concurrency), []).append(row)
                    print(json.dumps(row), flush=True)
    finally:
        child.stdin.close()
        child.wait(10)
    print(f"medians over {args.repeat} round(s):")
    print("concurrency | client        | requests/s | cpu ms/request | vs ours cpu")
    for concurrency in args.concurrency:
        base = statistics.median(r["cpu_ms_per_request"] for r in rows[("ours", concurrency)]) \
            if ("ours", concurrency) in rows else None
        for name in args.clients:
            group = rows[(name, concurrency)]
            cpu = statistics.median(r["cpu_ms_per_request"] for r in group)
            rate = statistics.median(r["requests_per_s"] for r in group)
            versus = f"{cpu / base:.2f}x" if base else "-"
            print(f"{concurrency:>11} | {name:<13} | {rate:>10.1f} | {cpu:>14.3f} | {versus}")


if __name__ == "__main__":
    main()
