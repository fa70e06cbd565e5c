"""The vLLM/SGLang samplers' HTTP path against real loopback servers that write exact bytes.

A raw asyncio server (its own thread and loop) reads each request and answers with scripted bytes,
so the tests control chunk boundaries, SSE framing, status lines and when the socket closes:
multi-line `data:`, `event: error`, comments and keep-alives, CRLF, errors, drops, hangs; whether a
turn is asked for as a stream; the pooled client reusing connections and holding hundreds of
concurrent streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.records import FinishReason, SampleResult, SamplingParams
from agentcore_rl_harness.samplers.sglang import SGLangSampler
from agentcore_rl_harness.samplers.vllm import VLLMSampler


class RawServer:
    """Loopback HTTP/1.1: `script(request) -> list of byte chunks | None` (None: close at once; a
    None item closes there, a float item sleeps that long).
    An `async` script may wait; `keep_alive=False` closes after each answer; `tls`: an
    `ssl.SSLContext` to serve HTTPS with. Records each request."""

    def __init__(self, script, *, keep_alive: bool = True, tls=None) -> None:
        self.script, self.keep_alive, self.tls = script, keep_alive, tls
        self.requests: list[dict] = []
        self.connections = 0
        self.open_now = self.most_open = 0  # connections open now / at most at once
        self.dropped = threading.Event()  # a client closed while its answer was being written
        self.loop = asyncio.new_event_loop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode().split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))))
                request = {"path": lines[0].split()[1], "headers": headers, "body": body}
                self.requests.append(request)
                chunks = self.script(request)
                if asyncio.iscoroutine(chunks):
                    chunks = await chunks
                if chunks is None:
                    return
                for chunk in chunks:
                    if chunk is None:  # close here
                        return
                    if isinstance(chunk, float):
                        await asyncio.sleep(chunk)
                        continue
                    writer.write(chunk)
                    await writer.drain()
                if not self.keep_alive:
                    return
        except ConnectionError:
            self.dropped.set()
        finally:
            self.open_now -= 1
            writer.close()

    @contextlib.contextmanager
    def running(self):
        started, stop, holder = threading.Event(), None, {}

        async def main():
            nonlocal stop
            stop = asyncio.Event()
            holder["server"] = server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=2048,
                                                                        ssl=self.tls)
            started.set()
            await stop.wait()
            server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        thread = threading.Thread(target=lambda: self.loop.run_until_complete(main()), daemon=True)
        thread.start()
        started.wait(5)
        try:
            scheme = "https" if self.tls else "http"
            yield f"{scheme}://127.0.0.1:{holder['server'].sockets[0].getsockname()[1]}"
        finally:
            self.loop.call_soon_threadsafe(stop.set)
            thread.join(5)
            self.loop.close()


def sse(*events: bytes) -> list[bytes]:
    """A chunked `text/event-stream` answer, one chunk per item."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return [head, *(b"%x\r\n%s\r\n" % (len(e), e) for e in events), b"0\r\n\r\n"]


def json_answer(payload: dict, status: int = 200) -> list[bytes]:
    body = json.dumps(payload).encode()
    return [b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)]


def vllm_choice(ids, finish=None):
    return {"index": 0, "token_ids": ids, "finish_reason": finish,
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": -0.5 * (i + 1)} for i, t in enumerate(ids)]}}


def sample(sampler, on_token=None, prompt=(1, 2, 3)):
    async def run():
        try:
            return await sampler.sample(prompt_token_ids=prompt, params=SamplingParams(), on_token=on_token)
        finally:
            await sampler.aclose()
    return asyncio.run(run())


def test_multi_line_data_event_lines_comments_and_crlf_parse_by_the_spec():
    first = json.dumps({"request_id": "r", "choices": [vllm_choice([7])]})
    split_at = first.index('"choices"')
    stream = sse(b": keep-alive\r\n\r\n",
                 # one JSON object over two data: lines (joined with a newline, still valid JSON)
                 b"event: message\r\ndata: " + first[:split_at].encode() + b"\r\ndata: " + first[split_at:].encode() + b"\r\n\r\n",
                 b": ping\n\n",
                 b"data: " + json.dumps({"request_id": "r", "choices": [vllm_choice([8], "stop")]}).encode()[:20],
                 json.dumps({"request_id": "r", "choices": [vllm_choice([8], "stop")]}).encode()[20:] + b"\n\n",
                 b"data: [DONE]\n\n")
    server = RawServer(lambda request: stream)
    seen = []
    with server.running() as url:
        result = sample(VLLMSampler(url), on_token=lambda t, lp: seen.append(t))
    assert result == SampleResult((7, 8), (-0.5, -0.5), FinishReason.STOP)
    assert seen == [7, 8] and server.requests[0]["body"]["stream"] is True


def test_an_error_event_is_a_sampling_error_naming_it():
    server = RawServer(lambda request: sse(b"event: error\ndata: engine out of memory\n\n"))
    with server.running() as url:
        with pytest.raises(SamplingError, match="vLLM stream from .* failed: engine out of memory"):
            sample(VLLMSampler(url), on_token=lambda t, lp: None)


@pytest.mark.parametrize("answer, match", [
    (json_answer({"error": "overloaded"}, 503), r"answered 503 at .*overloaded"),
    (None, r"ConnectionDropped"),  # accepted, then closed without an answer
    # chunked stream cut before its terminating chunk
    (sse(b'data: {"choices": [{"token_ids": [7], "logprobs": {"content": [{"logprob": -1.0}]}}]}\n\n')[:2],
     r"ConnectionDropped"),
    # a body delimited by the close (no length, not chunked) that ends before [DONE]
    ([b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
      b'data: {"choices": [{"token_ids": [7], "logprobs": {"content": [{"logprob": -1.0}]}}]}\n\n'],
     r"ended without 'data: \[DONE\]'"),
])
def test_server_errors_and_dropped_connections_are_clear_sampling_errors(answer, match):
    server = RawServer(lambda request: answer, keep_alive=False)
    with server.running() as url:
        with pytest.raises(SamplingError, match=match):
            sample(VLLMSampler(url), on_token=lambda t, lp: None)
        with pytest.raises(SamplingError, match=match.replace("ended without", "(ended without|ConnectionDropped)")):
            sample(VLLMSampler(url, stream=False))


def test_a_silent_server_is_a_timeout_not_a_hang():
    async def never(request):
        await asyncio.sleep(30)
    with RawServer(never).running() as url:
        with pytest.raises(SamplingError, match="Timeout: .*raise timeout_s"):
            sample(VLLMSampler(url, timeout_s=0.3))


def test_non_streamed_turns_are_plain_json_requests_and_streamed_ones_streams():
    def script(request):
        if request["body"]["stream"]:
            return sse(b"data: " + json.dumps({"choices": [vllm_choice([5, 6], "stop")]}).encode() + b"\n\n",
                       b"data: [DONE]\n\n")
        return json_answer({"request_id": "r", "choices": [vllm_choice([5, 6], "length")]})
    server = RawServer(script)
    with server.running() as url:
        assert sample(VLLMSampler(url)).finish_reason is FinishReason.LENGTH
        assert sample(VLLMSampler(url), on_token=lambda t, lp: None).finish_reason is FinishReason.STOP
        assert sample(VLLMSampler(url, stream=True)).finish_reason is FinishReason.STOP
        assert sample(VLLMSampler(url, stream=False), on_token=lambda t, lp: None).finish_reason is FinishReason.LENGTH
    assert [r["body"]["stream"] for r in server.requests] == [False, True, True, False]


def test_sglang_non_streamed_turn_is_one_answer_read_once():
    ids = list(range(10, 60))
    answer = {"output_ids": ids, "meta_info": {"finish_reason": {"type": "stop"},
                                               "output_token_logprobs": [[-0.25, t, None] for t in ids]}}
    server = RawServer(lambda request: json_answer(answer))
    with server.running() as url:
        result = sample(SGLangSampler(url))
    assert result.token_ids == tuple(ids) and result.logprobs == (-0.25,) * 50
    assert len(server.requests) == 1 and server.requests[0]["body"]["stream"] is False


def test_connections_are_pooled_and_hundreds_of_streams_run_at_once():
    """400 concurrent streamed samples: the server answers none until all 400 are open, so a
    client pool smaller than that would deadlock; a second wave reuses the same connections."""
    wanted = 400
    arrived = asyncio.Event()
    count = [0]

    async def script(request):
        count[0] += 1
        if count[0] >= wanted:
            arrived.set()
        await asyncio.wait_for(arrived.wait(), 20)
        rid = request["body"]["request_id"]
        return sse(b"data: " + json.dumps({"request_id": rid, "choices": [vllm_choice([len(request["body"]["token_ids"])])]}).encode()
                   + b"\n\n", b"data: " + json.dumps({"choices": [vllm_choice([2], "stop")]}).encode() + b"\n\n",
                   b"data: [DONE]\n\n")
    server = RawServer(script)

    async def run(url):
        sampler = VLLMSampler(url)
        try:
            for _ in range(2):
                results = await asyncio.gather(*(sampler.sample(prompt_token_ids=tuple(range(n + 1)), params=SamplingParams(),
                                                                on_token=lambda t, lp: None) for n in range(wanted)))
                assert [r.token_ids for r in results] == [(n + 1, 2) for n in range(wanted)]
        finally:
            await sampler.aclose()
    with server.running() as url:
        asyncio.run(run(url))
    assert len(server.requests) == 2 * wanted
    assert server.connections == wanted  # the second wave went over the first wave's connections


def test_cancelling_a_streamed_sample_drops_its_connection():
    async def slow(request):
        head, first, *rest = sse(b'data: {"choices": [{"token_ids": [7], "logprobs": {"content": [{"logprob": -1.0}]}}]}\n\n',
                                 *[b": tick\n\n"] * 200)
        return [head, first, *[part for chunk in rest for part in (0.02, chunk)]]
    server = RawServer(slow)
    seen = []

    async def run(url):
        sampler = VLLMSampler(url)
        task = asyncio.create_task(sampler.sample(prompt_token_ids=[1], params=SamplingParams(),
                                                  on_token=lambda t, lp: seen.append(t)))
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await sampler.aclose()
    with server.running() as url:
        asyncio.run(run(url))
        assert server.dropped.wait(5)  # the server's next write hit a closed socket: vLLM would abort
    assert seen == [7]


def test_one_sampler_serves_successive_event_loops():
    server = RawServer(lambda request: json_answer({"choices": [vllm_choice([4], "stop")]}))
    with server.running() as url:
        sampler = VLLMSampler(url)
        for _ in range(2):
            assert asyncio.run(sampler.sample(prompt_token_ids=[1], params=SamplingParams())).token_ids == (4,)
        asyncio.run(sampler.aclose())
    assert len(server.requests) == 2


def test_bad_token_ids_and_numpy_prompts():
    import numpy as np

    server = RawServer(lambda request: json_answer({"choices": [vllm_choice(["7"], "stop")]}))
    with server.running() as url:
        with pytest.raises(SamplingError, match="token id '7' at position 0; expected an integer"):
            sample(VLLMSampler(url), prompt=np.array([1, 2], dtype=np.int64))
    assert server.requests[0]["body"]["token_ids"] == [1, 2]
