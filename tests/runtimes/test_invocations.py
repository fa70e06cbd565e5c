"""`_invocations.settle`: answers that are not the result yet (ART's start/get states, the RL
app's at-once accept), and the local runtime's S3 stand-in (`_result_sink`) with real boto3."""

from __future__ import annotations

import asyncio

import pytest

from agentcore_rl_harness.runtimes import _invocations as inv
from agentcore_rl_harness.runtimes._result_sink import ResultSink, _decode_aws_chunked

def state(status, **extra):
    return {"version": 1, "invocation_id": "inv1", "status": status, **extra}


def getter(answers):
    calls = []

    async def get(invocation_id):
        calls.append(invocation_id)
        return answers.pop(0)

    return get, calls


async def settle(answer, get=None):
    get = get or getter([])[0]
    return await inv.settle(answer, get=get, poll_initial_s=0.001, poll_max_s=0.01)


@pytest.mark.asyncio
async def test_a_plain_answer_is_the_result():
    assert await settle({"answer": 42, "status": "done"}) == {"answer": 42, "status": "done"}


@pytest.mark.asyncio
async def test_an_in_progress_state_is_followed_until_completed():
    get, calls = getter([state("in_progress"), state("completed", result=[1, 2])])
    assert await settle(state("in_progress"), get) == {"output": [1, 2]}
    assert calls == ["inv1", "inv1"]


@pytest.mark.parametrize("final,said", [
    (state("completed", error="boom"), "ended completed: boom"),
    (state("interrupted"), "ended interrupted: no result"),
    (state("not_found"), "ended not_found"),
    ({"error": "Unknown runtime invocation field"}, "not that invocation's state"),
    ({**state("completed", result=1), "invocation_id": "other"}, "not that invocation's state"),
])
@pytest.mark.asyncio
async def test_an_invocation_without_a_result_is_a_failure_saying_why(final, said):
    get, _ = getter([final])
    with pytest.raises(inv.InvocationFailed, match=said):
        await settle(state("in_progress"), get)


@pytest.mark.asyncio
async def test_a_background_accept_is_an_invocation_failure_naming_the_result_mode_that_works():
    with pytest.raises(inv.InvocationFailed, match="Use --agentcore-rl-set runtime.result_mode=s3"):
        await settle({"status": "processing"})


def test_only_exact_shapes_are_recognised():
    assert inv.invocation_state(state("completed", result=1)) is not None
    assert inv.invocation_state({**state("completed"), "extra": 1}) is None  # an agent's own dict
    assert inv.invocation_state({**state("completed"), "version": 2}) is None
    assert inv.is_background_accept({"status": "accepted", "s3_bucket": "b", "result_key": "k"})
    assert not inv.is_background_accept({"status": "processing", "answer": 3})


def test_payload_per_result_mode_sends_the_s3_triple_only_in_s3_mode():
    base = {"q": 1, "_rollout": {"api_key": "k"}}
    options = dict(exp_id="e", bucket="b", input_id="r1", session_id="s" * 33)
    inline, key = inv.prepare_payload(base, result_mode="inline", **options)
    assert inline == base and key is None
    s3, key = inv.prepare_payload(base, result_mode="s3", **options)
    assert key == f"e/r1/{'s' * 33}.json"
    assert {"exp_id": "e", "input_id": "r1", "s3_bucket": "b", "result_key": key} .items() <= s3["_rollout"].items()
    started, key = inv.prepare_payload(base, result_mode="start_get", **options)
    assert key is None and started["_agentcore_runtime"]["operation"] == "start"
    assert started["_agentcore_runtime"]["background"] is True
    with pytest.raises(ValueError, match="reserved key"):
        inv.prepare_payload(started, result_mode="start_get", **options)


@pytest.mark.asyncio
async def test_the_result_sink_takes_what_real_boto3_puts(monkeypatch):
    import boto3

    sink = ResultSink()
    try:
        for name, value in sink.environment().items():
            monkeypatch.setenv(name, value)
        client = boto3.client("s3")
        client.put_object(Bucket="bk", Key="e/r/s.json", Body=b'{"status_code": 200, "x": 1, "input_id": "r"}')
        assert await asyncio.wait_for(sink.result("bk", "e/r/s.json"), 5) == {"x": 1}
        client.put_object(Bucket="bk", Key="e/r/t.json", Body=b'{"status_code": 500, "stop_reason": "bad"}')
        with pytest.raises(Exception, match="status_code 500"):
            await asyncio.wait_for(sink.result("bk", "e/r/t.json"), 5)
    finally:
        sink.close()


def test_aws_chunked_bodies_are_decoded():
    body = b"5;chunk-signature=ab\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"
    assert _decode_aws_chunked(body) == b"hello world"
