"""`SGLangSampler` against a loopback server answering like SGLang 0.5's native `/generate`.

Shapes from SGLang's native API docs (https://docs.sglang.io/basic_usage/native_api.html,
https://docs.sglang.io/basic_usage/sampling_params.html; `GenerateReqInput` in
`sglang/srt/managers/io_struct.py`, SGLang 0.5): the answer is `{text, output_ids, meta_info}`
with `meta_info.finish_reason = {"type": "stop", "matched": id} | {"type": "length", "length": n}`
and `meta_info.output_token_logprobs = [[logprob, token_id, text-or-null], ...]`;
`POST /abort_request {"rid"}` stops a request.

Streaming (`"stream": true`; `generate_request` in `sglang/srt/entrypoints/http_server.py` and
`TokenizerManager._handle_batch_output`, SGLang 0.5): `data: <json>` events shaped like the JSON
answer with `meta_info.finish_reason` null until the last, then `data: [DONE]`; `output_ids` and
`output_token_logprobs` are cumulative by default, only the new ones under
`--incremental-streaming-output`.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from loopback_app import serving
from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.records import FinishReason, SampleResult, SamplingParams
from agentcore_rl_harness.gateway.sampling import routing_key
from agentcore_rl_harness.samplers.sglang import SGLangSampler


def sglang_response(rid, token_ids, logprobs, finish=None):
    finish = finish or {"type": "stop", "matched": token_ids[-1]}
    meta = {"id": rid, "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": len(token_ids),
            "cached_tokens": 0, "e2e_latency": 0.01}
    if logprobs is not None:
        meta["output_token_logprobs"] = [[lp, t, None] for t, lp in zip(token_ids, logprobs)]
    return {"text": "...", "output_ids": token_ids, "meta_info": meta}


class FakeSGLang:
    def __init__(self, answer=None, *, hang=False, chunks=None):
        self.answer, self.hang, self.chunks = answer, hang, chunks
        self.requests, self.aborts = [], []
        self.received = threading.Event()
        self.app = Starlette(routes=[Route("/generate", self.generate, methods=["POST"]),
                                     Route("/abort_request", self.abort, methods=["POST"])])

    async def generate(self, request: Request):
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        self.received.set()
        if self.chunks is not None and body.get("stream"):
            events, hang_after = self.chunks(body)

            async def stream():
                for event in events:
                    yield f"data: {json.dumps(event)}\n\n"
                if hang_after:
                    await asyncio.sleep(30)
                yield "data: [DONE]\n\n"
            return StreamingResponse(stream(), media_type="text/event-stream")
        if self.hang:
            await asyncio.sleep(30)
        status, payload = self.answer(body)
        return JSONResponse(payload, status)

    async def abort(self, request: Request):
        self.aborts.append(await request.json())
        return Response(status_code=200)


def _sample(sampler, prompt=(1, 2, 3), on_token=None, **params):
    async def run():
        try:
            return await sampler.sample(prompt_token_ids=prompt, params=SamplingParams(**params), on_token=on_token)
        finally:
            await sampler.aclose()
    return asyncio.run(run())


def test_input_ids_in_logprob_triples_out_with_session_header():
    fake = FakeSGLang(lambda body: (200, sglang_response(body["rid"], [9, 10, 2], [-0.5, -0.25, -0.125])))
    seen = []
    with serving(fake.app) as url:
        sampler = SGLangSampler(url)
        assert isinstance(sampler, SamplingBackend)
        with routing_key("s-1"):
            result = _sample(sampler, prompt=[4, 5], on_token=lambda t, lp: seen.append(t),
                             temperature=0.9, top_p=0.95, top_k=20, max_tokens=8, stop_token_ids=(2,), seed=1)
    assert result == SampleResult((9, 10, 2), (-0.5, -0.25, -0.125), FinishReason.STOP)
    assert seen == [9, 10, 2]
    headers, body = fake.requests[0]
    assert headers["x-session-id"] == "s-1"
    assert body["input_ids"] == [4, 5] and body["return_logprob"] is True and body["stream"] is True
    assert body["sampling_params"] == {"temperature": 0.9, "top_p": 0.95, "top_k": 20, "max_new_tokens": 8,
                                       "stop_token_ids": [2], "skip_special_tokens": False, "no_stop_trim": True,
                                       "sampling_seed": 1}


def test_length_finish():
    fake = FakeSGLang(lambda body: (200, sglang_response(body["rid"], [3, 3], [-1.0, -1.0], {"type": "length", "length": 2})))
    with serving(fake.app) as url:
        assert _sample(SGLangSampler(url), max_tokens=2).finish_reason is FinishReason.LENGTH
    assert fake.requests[0][1]["sampling_params"]["top_k"] == -1


@pytest.mark.parametrize("answer, match", [
    (lambda body: (200, sglang_response(body["rid"], [9, 10], None)), "2 tokens but no logprobs"),
    (lambda body: (200, {**sglang_response(body["rid"], [9], [-0.1]),
                         "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[None, 9, None]]}}),
     "logprob None"),
    (lambda body: (200, {**sglang_response(body["rid"], [9], [-0.1]), "output_ids": [8]}), "do not match"),
    (lambda body: (200, sglang_response(body["rid"], [9], [-0.1], {"type": "abort", "message": "x"})), "'abort'"),
    (lambda body: (400, {"error": "bad input"}), "answered 400"),
])
def test_unusable_answers_are_sampling_errors(answer, match):
    with serving(FakeSGLang(answer).app) as url:
        with pytest.raises(SamplingError, match=match):
            _sample(SGLangSampler(url))


def test_cancelled_sample_aborts_the_request_on_the_server():
    fake = FakeSGLang(hang=True)
    with serving(fake.app) as url:
        async def run():
            sampler = SGLangSampler(url)
            task = asyncio.create_task(sampler.sample(prompt_token_ids=[1], params=SamplingParams()))
            while not fake.received.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await sampler.aclose()
        asyncio.run(run())
    assert fake.aborts == [{"rid": fake.requests[0][1]["rid"]}]


def _cumulative_chunks(rid, token_ids, logprobs, finish):
    """SGLang's default stream: each event repeats all ids and logprobs so far."""
    events = []
    for end in range(1, len(token_ids) + 1):
        event = sglang_response(rid, token_ids[:end], logprobs[:end], finish if end == len(token_ids) else None)
        if end < len(token_ids):
            event["meta_info"]["finish_reason"] = None
        events.append(event)
    return events


def _incremental_chunks(rid, token_ids, logprobs, finish):
    """`--incremental-streaming-output`: each event has only the new ids and logprobs."""
    events = []
    for index, (token_id, logprob) in enumerate(zip(token_ids, logprobs)):
        last = index == len(token_ids) - 1
        event = sglang_response(rid, [token_id], [logprob], finish if last else None)
        if not last:
            event["meta_info"]["finish_reason"] = None
        events.append(event)
    return events


@pytest.mark.parametrize("make, incremental", [(_cumulative_chunks, False), (_incremental_chunks, True)])
def test_streamed_tokens_reach_on_token_in_order(make, incremental):
    ids, logprobs = [9, 10, 11, 2], [-0.5, -0.25, -0.75, -0.125]
    fake = FakeSGLang(chunks=lambda body: (make(body["rid"], ids, logprobs, {"type": "stop", "matched": 2}), False))
    seen = []
    with serving(fake.app) as url:
        result = _sample(SGLangSampler(url, incremental_output=incremental), on_token=lambda t, lp: seen.append((t, lp)))
    assert result == SampleResult(tuple(ids), tuple(logprobs), FinishReason.STOP)
    assert seen == list(zip(ids, logprobs))


def test_cumulative_stream_that_rewrites_earlier_ids_is_an_error():
    first = sglang_response("r", [9], [-0.5])
    first["meta_info"]["finish_reason"] = None
    fake = FakeSGLang(chunks=lambda body: ([first, sglang_response("r", [8, 10], [-0.1, -0.2])], False))
    with serving(fake.app) as url:
        with pytest.raises(SamplingError, match="do not extend"):
            _sample(SGLangSampler(url, stream=True))


def test_stream_error_event_is_a_sampling_error():
    fake = FakeSGLang(chunks=lambda body: ([{"error": {"message": "out of memory"}}], False))
    with serving(fake.app) as url:
        with pytest.raises(SamplingError, match="out of memory"):
            _sample(SGLangSampler(url, stream=True))


def test_cancel_mid_stream_aborts_after_tokens_arrived():
    chunk = sglang_response("r", [9], [-0.5])
    chunk["meta_info"]["finish_reason"] = None
    fake = FakeSGLang(chunks=lambda body: ([chunk], True))
    seen = []
    with serving(fake.app) as url:
        async def run():
            sampler = SGLangSampler(url)
            task = asyncio.create_task(sampler.sample(prompt_token_ids=[1], params=SamplingParams(),
                                                      on_token=lambda t, lp: seen.append(t)))
            while not seen:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await sampler.aclose()
        asyncio.run(run())
    assert seen == [9]
    assert fake.aborts == [{"rid": fake.requests[0][1]["rid"]}]
