"""The `agentcore` runtime over the wire: real boto3 -> local data-plane stub -> real agent.

S3 mode runs against moto's S3 server on loopback; the last section validates every request the
runtime makes against botocore's own service model with `Stubber`.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import sys
import time

import boto3
import botocore.session
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from acr_stub import (
    DataPlaneStub,
    fake_model_app,
    load_agent_app,
    new_session_id,
    quick_runtime,
    serve,
    serve_data_plane,
)
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.errors import ConfigError, MissingDependencyError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes._rate import TokenBucket
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime, region_of
from agentcore_rl_harness.runtimes.base import AgentRef, AgentRuntime

pytestmark = pytest.mark.asyncio

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/scripted-Ab12Cd34Ef"
ART_ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/art-Ab12Cd34Ef"
BUCKET = "arl-results"  # the `aws` fixture (conftest.py) creates it
AGENT = AgentRef(task="test_scripted", agent=None)


@pytest.fixture(scope="module")
def scripted(aws):
    module, app = load_agent_app("scripted_agent.py")
    server = serve(app)
    yield module, server.url
    server.stop()


@pytest.fixture
def stub(scripted):
    with serve_data_plane({ARN: scripted[1]}) as plane:
        yield plane


runtime = functools.partial(quick_runtime, arns={"*": ARN})


async def run(rt, payload, *, timeout_s=20.0, session_id=None):
    return await rt.run_session(
        agent=AGENT, session_id=session_id or new_session_id(), payload=payload, timeout_s=timeout_s
    )


# -- inline results ------------------------------------------------------------------------------


async def test_is_an_agent_runtime(stub):
    rt = runtime(stub.url)
    assert isinstance(rt, AgentRuntime)
    await rt.aclose()


async def test_inline_json_result_over_the_wire_then_the_session_is_stopped(stub, scripted):
    rt = runtime(stub.url, qualifier="prod")
    session_id = new_session_id()
    outcome = await run(rt, {"x": 21, "_rollout": {"api_key": session_id}}, session_id=session_id)
    await rt.aclose()

    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 42, "session_id": session_id}
    assert outcome.error is None and outcome.elapsed_s > 0
    [call] = stub.invocations
    assert call["arn"] == ARN and call["session_id"] == session_id
    assert call["qualifier"] == "prod" and call["content_type"] == "application/json"
    sent = json.loads(call["body"])
    assert sent["x"] == 21
    assert sent["_rollout"] == {"api_key": session_id, "session_id": session_id}
    assert [(s["arn"], s["session_id"], s["qualifier"]) for s in stub.stops] == [
        (ARN, session_id, "prod")
    ]
    assert scripted[0].calls[session_id] == 1
    assert rt.live_sessions == 0


async def test_streamed_result_is_the_last_data_event(stub):
    rt = runtime(stub.url)
    outcome = await run(rt, {"mode": "stream", "x": 5})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 10}


async def test_agent_that_raises_is_an_agent_error(stub):
    rt = runtime(stub.url)
    outcome = await run(rt, {"mode": "raise", "x": 1})
    await rt.aclose()
    assert outcome.status is Status.AGENT_ERROR
    assert "RuntimeClientError" in outcome.error and "Received error (500)" in outcome.error
    assert ARN in outcome.error
    assert len(stub.stops) == 1


async def test_tasks_map_to_their_own_arns(stub, scripted):
    other = ARN.replace("scripted", "other")
    stub.agents[other] = scripted[1]
    rt = runtime(stub.url, arns={"test_other": other, "*": ARN})
    await run(rt, {"x": 1})
    await rt.run_session(
        agent=AgentRef(task="test_other", agent=None),
        session_id=new_session_id(),
        payload={"x": 2},
        timeout_s=10,
    )
    await rt.aclose()
    assert [call["arn"] for call in stub.invocations] == [ARN, other]


async def test_live_sessions_are_capped(stub):
    rt = runtime(stub.url, concurrency=2)
    sleepy = {"mode": "sleep", "sleep_s": 0.2, "x": 1}
    outcomes = await asyncio.gather(*(run(rt, sleepy) for _ in range(5)))
    await rt.aclose()
    assert {o.status for o in outcomes} == {Status.COMPLETED}
    assert stub.peak_inflight == 2


async def test_invokes_and_stops_share_one_rate_limit_per_arn(stub):
    rt = runtime(stub.url, tps_per_arn=20, concurrency=4)
    started = time.monotonic()
    await asyncio.gather(*(run(rt, {"x": i}) for i in range(4)))
    elapsed = time.monotonic() - started
    await rt.aclose()
    assert len(stub.invocations) + len(stub.stops) == 8
    # 8 calls at 20/s, burst 1: the bucket's documented bound is rate * w + burst + 0.5 grants in
    # w seconds (half a token of catch-up slack), so 8 grants take at least 6.5 / 20 s
    assert elapsed >= (8 - 1 - 0.5) / 20 - 0.005


# -- S3 results (moto) ---------------------------------------------------------------------------


async def test_s3_mode_end_to_end(stub, scripted, aws):
    rt = runtime(stub.url, result_mode="s3", s3_bucket=BUCKET, exp_id="exp-1", s3_endpoint_url=aws)
    session_id = new_session_id()
    payload = {"x": 4, "_rollout": {"api_key": session_id, "input_id": "row-7"}}
    outcome = await run(rt, payload, session_id=session_id)
    await rt.aclose()

    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 8, "session_id": session_id}
    sent = json.loads(stub.invocations[0]["body"])["_rollout"]
    key = f"exp-1/row-7/{session_id}.json"
    assert sent == {
        "api_key": session_id,
        "session_id": session_id,
        "exp_id": "exp-1",
        "input_id": "row-7",
        "s3_bucket": BUCKET,
        "result_key": key,
    }
    stored = json.loads(
        boto3.client("s3", endpoint_url=aws).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    )
    assert stored["status_code"] == 200 and stored["answer"] == 8
    assert len(stub.stops) == 1


async def test_s3_mode_input_id_defaults_to_the_task(stub, aws):
    rt = runtime(stub.url, result_mode="s3", s3_bucket=BUCKET, exp_id="exp-2", s3_endpoint_url=aws)
    outcome = await run(rt, {"x": 1})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert json.loads(stub.invocations[0]["body"])["_rollout"]["input_id"] == "test_scripted"


async def test_s3_error_result_is_an_agent_error_with_the_traceback(stub, aws):
    rt = runtime(stub.url, result_mode="s3", s3_bucket=BUCKET, s3_endpoint_url=aws)
    outcome = await run(rt, {"mode": "raise", "x": 3})
    await rt.aclose()
    assert outcome.status is Status.AGENT_ERROR
    assert "status_code 500" in outcome.error
    assert "ValueError: scripted failure for x=3" in outcome.error
    assert "Traceback" in outcome.error


async def test_art_style_agent_runs_unchanged(aws):
    seen: list[dict] = []
    model = serve(fake_model_app(seen))
    _, app = load_agent_app("art_style_agent.py")
    agent = serve(app)
    plane = DataPlaneStub(agents={ART_ARN: agent.url})
    endpoint = serve(plane.app)
    try:
        rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"test_gsm8k": ART_ARN}, endpoint_url=endpoint.url, result_mode="s3", s3_bucket=BUCKET, s3_endpoint_url=aws, poll_initial_s=0.02))
        session_id = new_session_id()
        payload = {
            "prompt": "6 * 7?",
            "answer": "42",
            "_rollout": {
                "base_url": model.url + "/v1",
                "model_id": "policy",
                "api_key": session_id,
                "sampling_params": {"max_tokens": 16},
            },
        }
        outcome = await rt.run_session(
            agent=AgentRef(task="test_gsm8k", agent=None),
            session_id=session_id,
            payload=payload,
            timeout_s=20,
        )
        await rt.aclose()
    finally:
        for server in (endpoint, agent, model):
            server.stop()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result["rewards"] == [1.0]
    assert outcome.result["rollout_data"] == [{"text": "#### 42"}]
    [request] = seen
    assert request["authorization"] == f"Bearer {session_id}"
    assert request["body"]["model"] == "policy" and request["body"]["max_tokens"] == 16


# -- construction --------------------------------------------------------------------------------


async def test_region_comes_from_the_arn_and_invokes_are_never_blindly_retried(aws):
    rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN.replace("us-west-2", "eu-central-1")}))
    [client] = rt._clients.values()
    assert client.meta.region_name == "eu-central-1"
    assert client.meta.config.retries["total_max_attempts"] == 1
    await rt.aclose()
    assert region_of(ARN) == "us-west-2"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"arns": {}}, "runtime.arns is empty"),
        ({"arns": {"*": "my-agent"}}, "not an AgentCore runtime ARN"),
        ({"arns": {"*": ARN}, "result_mode": "sqs"}, "valid choices: \\['inline', 's3', 'start_get'\\]"),
        ({"arns": {"*": ARN}, "result_mode": "s3"}, "needs runtime.s3_bucket"),
        ({"arns": {"*": ARN}, "concurrency": 0}, "runtime.concurrency=0"),
    ],
)
async def test_bad_settings_are_config_errors(aws, options, message):
    with pytest.raises(ConfigError, match=message):
        AgentCoreRuntime(AgentCoreRuntimeConfig(**options))


async def test_a_task_without_an_arn_is_a_config_error(aws):
    rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"test_a": ARN}))
    with pytest.raises(ConfigError, match="task 'test_b' has no AgentCore runtime ARN"):
        await rt.run_session(
            agent=AgentRef(task="test_b", agent=None),
            session_id=new_session_id(),
            payload={},
            timeout_s=1,
        )
    await rt.aclose()


async def test_a_short_session_id_is_refused_before_any_call(aws):
    rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}))
    with pytest.raises(ValueError, match="AgentCore needs 33-256"):
        await run(rt, {}, session_id="too-short")
    await rt.aclose()


async def test_missing_boto3_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'agentcore-rl-harness\[aws\]'"):
        AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}))


async def test_token_bucket_paces_callers():
    bucket = TokenBucket(50.0)
    started = time.monotonic()
    for _ in range(6):
        await bucket.acquire()
    assert time.monotonic() - started >= 5 / 50 - 0.01


# -- every request validated against botocore's model (Stubber) ---------------------------------


def stubbed(service: str):
    session = botocore.session.get_session()
    client = session.create_client(
        service, region_name="us-west-2", aws_access_key_id="k", aws_secret_access_key="s"
    )
    return client, Stubber(client)


def body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


async def test_inline_requests_match_the_service_model():
    client, stubber = stubbed("bedrock-agentcore")
    session_id = new_session_id()
    payload = {"x": 1, "_rollout": {"api_key": session_id}}
    sent = json.dumps({"x": 1, "_rollout": {"api_key": session_id, "session_id": session_id}})
    stubber.add_response(
        "invoke_agent_runtime",
        {"response": body(b'{"answer": 2}'), "contentType": "application/json", "statusCode": 200},
        expected_params={
            "agentRuntimeArn": ARN,
            "runtimeSessionId": session_id,
            "qualifier": "DEFAULT",
            "contentType": "application/json",
            "accept": "application/json, text/event-stream",
            "payload": sent.encode(),
        },
    )
    stubber.add_response(
        "stop_runtime_session",
        {"runtimeSessionId": session_id, "statusCode": 200},
        expected_params={
            "agentRuntimeArn": ARN,
            "runtimeSessionId": session_id,
            "qualifier": "DEFAULT",
            "clientToken": ANY,
        },
    )
    with stubber:
        rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}), client_factory=lambda service, region: client)
        outcome = await run(rt, payload, session_id=session_id)
        await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 2}
    stubber.assert_no_pending_responses()


async def test_s3_requests_match_the_service_models(caplog):
    acr, acr_stubber = stubbed("bedrock-agentcore")
    s3, s3_stubber = stubbed("s3")
    session_id = new_session_id()
    key = f"exp-9/test_scripted/{session_id}.json"
    acr_stubber.add_response(
        "invoke_agent_runtime",
        {"response": body(b'{"status": "accepted"}'), "contentType": "application/json"},
        expected_params={
            "agentRuntimeArn": ARN,
            "runtimeSessionId": session_id,
            "qualifier": "DEFAULT",
            "contentType": "application/json",
            "accept": "application/json, text/event-stream",
            "payload": ANY,
        },
    )
    where = {"Bucket": BUCKET, "Key": key}
    s3_stubber.add_client_error("head_object", "404", http_status_code=404, expected_params=where)
    s3_stubber.add_client_error("head_object", "403", http_status_code=403, expected_params=where)
    s3_stubber.add_client_error("head_object", "403", http_status_code=403, expected_params=where)
    s3_stubber.add_response("head_object", {"ContentLength": 10}, expected_params=where)
    document = json.dumps({"answer": 7, "status_code": 200, "stop_reason": "end_turn"}).encode()
    s3_stubber.add_response("get_object", {"Body": body(document)}, expected_params=where)
    acr_stubber.add_response("stop_runtime_session", {}, expected_params=None)
    clients = {"bedrock-agentcore": acr, "s3": s3}
    caplog.set_level(logging.WARNING, logger="agentcore_rl_harness.runtimes._s3_results")
    with acr_stubber, s3_stubber:
        rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, result_mode="s3", s3_bucket=BUCKET, exp_id="exp-9", poll_initial_s=0.01), client_factory=lambda service, region: clients[service])
        outcome = await run(rt, {"x": 1}, session_id=session_id)
        await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 7}
    forbidden = [r for r in caplog.records if "returned 403" in r.getMessage()]
    assert len(forbidden) == 1 and "s3:ListBucket" in forbidden[0].getMessage()
    acr_stubber.assert_no_pending_responses()
    s3_stubber.assert_no_pending_responses()
