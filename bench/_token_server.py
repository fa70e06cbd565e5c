"""A fake token server for the gateway benchmark: vLLM's `POST /inference/v1/generate` and SGLang's
`POST /generate`, token ids in, a fixed reply's token ids + logprobs out, no model.

It runs in its own process (uvloop + httptools, one asyncio protocol, no framework) so that what
a `--backend vllm-http` row measures is the gateway and its HTTP sampler client, not this server.
Answers are shaped as vLLM's tokens-in/tokens-out API (see `samplers/vllm.py`): JSON for
`stream: false`, else `text/event-stream` with one `data:` event per token then `data: [DONE]`;
SGLang's native `/generate` likewise (`samplers/sglang.py`, incremental events). Keep-alive
follows the client (HTTP/1.1 default on, `Connection: close` honoured).

Run:  python bench/_token_server.py --reply-ids 1,2,3 [--delay-ms 0]
Prints `{"port": N}` on stdout once it listens on 127.0.0.1; stops on SIGTERM or stdin EOF.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import httptools
import orjson


class TokenServer(asyncio.Protocol):
    def __init__(self, reply_ids: list[int], delay_s: float) -> None:
        self.reply_ids, self.delay_s = reply_ids, delay_s
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(400, b"application/json", b'{"error": "bad request"}', keep_alive=False)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body, keep_alive = self.url, b"".join(self.body), self.parser.should_keep_alive()
        self.url, self.body = b"", []
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._write(400, b"application/json", b'{"error": "body is not JSON"}', keep_alive)
            return
        if url == b"/inference/v1/generate":
            answer = self._vllm
        elif url == b"/generate":
            answer = self._sglang
        else:
            self._write(404, b"application/json", b'{"error": "not found"}', keep_alive)
            return
        if self.delay_s:
            asyncio.get_running_loop().call_later(self.delay_s, answer, request, keep_alive)
        else:
            answer(request, keep_alive)

    def _vllm(self, request: dict, keep_alive: bool) -> None:
        rid = request.get("request_id") or "r"

        def choice(ids: list[int], finish: str | None) -> dict:
            return {"index": 0, "token_ids": ids, "finish_reason": finish, "logprobs": {"content": [
                {"token": f"token_id:{t}", "logprob": -0.1, "bytes": None, "top_logprobs": []} for t in ids]}}
        if not request.get("stream"):
            self._write(200, b"application/json", orjson.dumps(
                {"request_id": rid, "choices": [choice(self.reply_ids, "stop")], "prompt_logprobs": None,
                 "kv_transfer_params": None}), keep_alive)
            return
        last = len(self.reply_ids) - 1
        self._stream([{"request_id": rid, "choices": [choice([t], "stop" if i == last else None)]}
                      for i, t in enumerate(self.reply_ids)], keep_alive)

    def _sglang(self, request: dict, keep_alive: bool) -> None:
        rid = request.get("rid") or "r"

        def answer(ids: list[int], finish: dict | None) -> dict:
            return {"text": "", "output_ids": ids, "meta_info": {
                "id": rid, "finish_reason": finish, "output_token_logprobs": [[-0.1, t, None] for t in ids]}}
        done = {"type": "stop", "matched": self.reply_ids[-1]}
        if not request.get("stream"):
            self._write(200, b"application/json", orjson.dumps(answer(self.reply_ids, done)), keep_alive)
            return
        last = len(self.reply_ids) - 1
        self._stream([answer([t], done if i == last else None) for i, t in enumerate(self.reply_ids)], keep_alive)

    def _stream(self, events: list[dict], keep_alive: bool) -> None:
        chunks = [b"data: " + orjson.dumps(event) + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]
        body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                + (b"" if keep_alive else b"connection: close\r\n") + b"\r\n")
        self._send(head + body, keep_alive)

    def _write(self, status: int, content_type: bytes, body: bytes, keep_alive: bool) -> None:
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}[status]
        head = (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (status, reason, content_type, len(body))
                + (b"" if keep_alive else b"connection: close\r\n") + b"\r\n")
        self._send(head + body, keep_alive)

    def _send(self, data: bytes, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)
        if not keep_alive:
            self.transport.close()


async def serve(reply_ids: list[int], delay_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: TokenServer(reply_ids, delay_s), "127.0.0.1", 0, backlog=4096)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reply-ids", required=True, help="comma-separated token ids of the reply")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait before each answer (a decode time)")
    args = parser.parse_args()
    reply_ids = [int(t) for t in args.reply_ids.split(",")]
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(reply_ids, args.delay_ms / 1e3))


if __name__ == "__main__":
    main()
