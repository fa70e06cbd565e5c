"""A light load driver for the gateway benchmark: raw HTTP/1.1 over keep-alive connections.

Each worker holds one TCP connection and runs its sessions back to back; each session is a
multi-turn chat (the reply is appended to the history, then a new user message) sent to
`POST /v1/chat/completions` with the session key as `Authorization: Bearer`. Request bodies are
built before the clock starts for a turn; the per-turn latency is write -> last body byte.
The driver is cheap on purpose (no SDK, orjson, uvloop when installed) so that the server, not
the driver, is what a run measures; `bench/gateway.py --target null` shows its ceiling.

Run as a child process:  python bench/_driver.py --base-url URL --turns T --workers-json FILE
where FILE holds a JSON list of lists of session ids (one list per worker). Prints one JSON line:
{"start": epoch, "end": epoch, "latencies": [...], "errors": n}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from urllib.parse import urlsplit

try:
    import orjson

    dumps, loads = orjson.dumps, orjson.loads
except ImportError:  # the anchor's venv may lack orjson
    def dumps(value):
        return json.dumps(value, separators=(",", ":")).encode()
    loads = json.loads

SYSTEM = "You are terse."
FIRST = "What is six times seven?"


class HttpError(Exception):
    pass


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, chunked = None, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    return status, await reader.readexactly(length or 0)


async def _worker(host: str, port: int, path: str, session_ids: list[str], turns: int,
                  latencies: list[float], errors: list[str]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    prefix = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    try:
        for session_id in session_ids:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FIRST}]
            auth = f"Authorization: Bearer {session_id}\r\n"
            for turn in range(turns):
                body = dumps({"model": "policy", "messages": messages, "temperature": 1.0})
                request = (prefix + auth + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
                start = time.perf_counter()
                writer.write(request)
                status, answer = await _read_response(reader)
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    errors.append(f"{status}: {answer[:300]!r}")
                    break
                content = loads(answer)["choices"][0]["message"]["content"]
                messages += [{"role": "assistant", "content": content},
                             {"role": "user", "content": f"And again, turn {turn + 2}?"}]
    finally:
        writer.close()


async def drive(base_url: str, workers: list[list[str]], turns: int) -> dict:
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/") + "/chat/completions"
    latencies: list[float] = []
    errors: list[str] = []
    start = time.time()
    await asyncio.gather(*(_worker(parts.hostname, parts.port, path, ids, turns, latencies, errors)
                           for ids in workers))
    return {"start": start, "end": time.time(), "latencies": latencies, "errors": len(errors),
            "first_error": errors[0] if errors else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--workers-json", required=True)
    args = parser.parse_args()
    with open(args.workers_json) as file:
        workers = json.load(file)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    print(json.dumps(runner(drive(args.base_url, workers, args.turns))), flush=True)


if __name__ == "__main__":
    main()
