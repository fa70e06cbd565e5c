"""`VLLMSampler` against a loopback server answering like vLLM 0.18's tokens-in/tokens-out API.

The response shapes are those of `GenerateResponse` / `GenerateResponseChoice` in
`vllm/entrypoints/serve/disagg/protocol.py` and `ServingTokens._create_tokens_logprobs` in
`vllm/entrypoints/serve/disagg/serving.py` (vLLM 0.18; docs:
https://docs.vllm.ai/en/v0.18.2/api/vllm/entrypoints/serve/disagg/serving/ and
https://docs.vllm.ai/en/latest/serving/online_serving/token_in_token_out/): `choices[i]` holds
`index`, `token_ids`, `finish_reason` and `logprobs.content[j] = {token: "token_id:<id>",
logprob, bytes, top_logprobs}`; a missing logprob is vLLM's placeholder -9999.0.

Streaming: `ServingTokens.serve_tokens_stream_generator` (vLLM main, commit 0001948b,
vllm/entrypoints/serve/disagg/serving.py) answers `text/event-stream`: per engine step
`data: {"request_id", "choices": [{"index", "logprobs", "finish_reason", "token_ids"}]}` with only
the NEW token ids (DELTA), `finish_reason` null until the last, an optional usage-only chunk
(`choices: []`), `data: {"error": ...}` on failure, and always `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from loopback_app import serving
from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.records import FinishReason, SampleResult, SamplingParams
from agentcore_rl_harness.gateway.sampling import routing_key
from agentcore_rl_harness.samplers.vllm import VLLMSampler


def vllm_response(request_id, token_ids, logprobs, finish="stop"):
    content = None if logprobs is None else [
        {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
        for t, lp in zip(token_ids, logprobs)]
    return {"request_id": request_id, "choices": [{"index": 0, "logprobs": None if content is None else {"content": content},
                                                   "finish_reason": finish, "token_ids": token_ids}],
            "prompt_logprobs": None, "kv_transfer_params": None}


class FakeVLLM:
    """Answers JSON, or, with `chunks` (a function of the request body giving `(events, gate)`),
    streams them as vLLM does, one event per step; a step waits on `gate` (a threading.Event)
    when one is given, so a test can watch tokens arrive before the sample ends."""

    def __init__(self, answer=None, chunks=None):
        self.answer, self.chunks, self.requests = answer, chunks, []
        self.app = Starlette(routes=[Route("/inference/v1/generate", self.generate, methods=["POST"])])

    async def generate(self, request: Request):
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        if self.chunks is not None and body.get("stream"):
            events, gate = self.chunks(body)

            async def stream():
                for index, event in enumerate(events):
                    if gate is not None and index > 0:
                        while not gate.is_set():
                            await asyncio.sleep(0.005)
                    yield f"data: {json.dumps(event)}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(stream(), media_type="text/event-stream")
        status, payload = self.answer(body)
        return JSONResponse(payload, status)


def vllm_chunk(request_id, token_ids, logprobs, finish=None):
    return vllm_response(request_id, token_ids, logprobs, finish) | {"prompt_logprobs": None}


def _sample(sampler, prompt=(1, 2, 3), on_token=None, **params):
    async def run():
        try:
            return await sampler.sample(prompt_token_ids=prompt, params=SamplingParams(**params), on_token=on_token)
        finally:
            await sampler.aclose()
    return asyncio.run(run())


def test_tokens_in_tokens_out_with_sticky_session_header_and_streamed_callbacks():
    fake = FakeVLLM(lambda body: (200, vllm_response(body["request_id"], [7, 8, 2], [-0.5, -0.25, -0.125])))
    seen = []
    with serving(fake.app) as url:
        sampler = VLLMSampler(url, model="policy")
        assert isinstance(sampler, SamplingBackend)
        with routing_key("session-abc"):
            result = _sample(sampler, prompt=[5, 6], on_token=lambda t, lp: seen.append((t, lp)),
                             temperature=0.7, top_k=0, max_tokens=16, stop_token_ids=(2,), seed=3)
    assert result == SampleResult((7, 8, 2), (-0.5, -0.25, -0.125), FinishReason.STOP)
    assert seen == [(7, -0.5), (8, -0.25), (2, -0.125)]
    headers, body = fake.requests[0]
    assert headers["x-session-id"] == "session-abc"
    assert body["token_ids"] == [5, 6] and body["model"] == "policy" and body["stream"] is True
    assert body["sampling_params"] == {"n": 1, "temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_tokens": 16,
                                       "stop_token_ids": [2], "logprobs": 0, "detokenize": False,
                                       "skip_special_tokens": False, "seed": 3}


def test_no_routing_header_outside_a_session_and_length_finish():
    fake = FakeVLLM(lambda body: (200, vllm_response(body["request_id"], [4, 4], [-1.0, -2.0], finish="length")))
    with serving(fake.app) as url:
        result = _sample(VLLMSampler(url), max_tokens=2)
    assert result.finish_reason is FinishReason.LENGTH
    assert "x-session-id" not in fake.requests[0][0] and "model" not in fake.requests[0][1]


@pytest.mark.parametrize("answer, match", [
    (lambda body: (200, vllm_response("r", [7, 8], None)), "2 tokens but no logprobs"),
    (lambda body: (200, vllm_response("r", [7, 8], [-0.1, -9999.0])), "placeholder"),
    (lambda body: (200, vllm_response("r", [7], [-0.1], finish="abort")), "finished with 'abort'"),
    (lambda body: (200, {"choices": []}), "no choices"),
    (lambda body: (500, {"error": {"message": "engine dead"}}), "answered 500 .*engine dead"),
])
def test_unusable_answers_are_sampling_errors_never_zeros(answer, match):
    with serving(FakeVLLM(answer).app) as url:
        with pytest.raises(SamplingError, match=match):
            _sample(VLLMSampler(url))


def test_connection_failure_is_a_sampling_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(SamplingError, match=r"vLLM request to .* failed: ConnectError"):
        _sample(VLLMSampler(f"http://127.0.0.1:{port}"))


def test_streamed_tokens_reach_on_token_as_the_engine_sends_them():
    gate = threading.Event()
    seen = []

    def chunks(body):
        rid = body["request_id"]
        return [vllm_chunk(rid, [7], [-0.5]), vllm_chunk(rid, [8, 9], [-0.25, -0.75]),
                vllm_chunk(rid, [2], [-0.125], finish="stop"),
                {"request_id": rid, "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4}}], gate

    def on_token(token_id, logprob):
        seen.append(token_id)
        if token_id == 7:
            assert not gate.is_set()  # the first token arrived while the engine still decodes
            gate.set()

    fake = FakeVLLM(chunks=chunks)
    with serving(fake.app) as url:
        result = _sample(VLLMSampler(url), prompt=[5], on_token=on_token, stop_token_ids=(2,))
    assert result == SampleResult((7, 8, 9, 2), (-0.5, -0.25, -0.75, -0.125), FinishReason.STOP)
    assert seen == [7, 8, 9, 2]


@pytest.mark.parametrize("events, match", [
    ([vllm_chunk("r", [7], [-0.5]), {"error": {"message": "engine died", "code": 500}}], "engine died"),
    ([vllm_chunk("r", [7], [-0.5])], "no finish_reason"),
    ([vllm_chunk("r", [7], None, finish="stop")], "1 tokens but no logprobs"),
])
def test_streamed_failures_are_sampling_errors(events, match):
    fake = FakeVLLM(chunks=lambda body: (events, None))
    with serving(fake.app) as url:
        with pytest.raises(SamplingError, match=match):
            _sample(VLLMSampler(url, stream=True))


def test_non_streaming_mode_sends_stream_false():
    fake = FakeVLLM(lambda body: (200, vllm_response(body["request_id"], [7], [-0.5])))
    with serving(fake.app) as url:
        assert _sample(VLLMSampler(url, stream=False)).token_ids == (7,)
    assert fake.requests[0][1]["stream"] is False
