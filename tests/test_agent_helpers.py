"""Agent-side helpers: reading `_rollout` and building gateway clients."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading
import time
import types

import httpx
import openai
import pytest
from bedrock_agentcore import BedrockAgentCoreApp

from agentcore_rl_harness.agent import (
    RolloutConfig,
    async_gateway_client,
    gateway_client,
    rollout_config,
    rollout_entrypoint,
)
from agentcore_rl_harness.errors import MissingDependencyError

PAYLOAD = {
    "prompt": "What is 2 + 3?",
    "_rollout": {
        "base_url": "http://127.0.0.1:8765/v1",
        "model_id": "smollm2-135m-instruct",
        "api_key": "session-abc",
        "sampling_params": {"temperature": 1.0, "max_tokens": 64},
    },
}


def test_rollout_config_reads_the_block():
    config = rollout_config(PAYLOAD)
    assert config == RolloutConfig(
        base_url="http://127.0.0.1:8765/v1",
        model_id="smollm2-135m-instruct",
        api_key="session-abc",
        sampling_params={"temperature": 1.0, "max_tokens": 64},
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.api_key = "other"


def test_sampling_params_are_optional():
    block = {k: v for k, v in PAYLOAD["_rollout"].items() if k != "sampling_params"}
    assert rollout_config({"_rollout": block}).sampling_params == {}


def test_payload_without_rollout_says_it_ran_outside_the_harness():
    with pytest.raises(ValueError, match="invoked outside the agentcore-rl harness"):
        rollout_config({"prompt": "hi"})


def test_incomplete_rollout_block_names_the_missing_keys():
    with pytest.raises(ValueError, match="lacks model_id, api_key"):
        rollout_config({"_rollout": {"base_url": "http://x/v1"}})


def test_gateway_client_points_at_the_gateway_with_the_session_key():
    client = gateway_client(PAYLOAD)
    assert isinstance(client, openai.OpenAI)
    assert str(client.base_url).rstrip("/") == "http://127.0.0.1:8765/v1"
    assert client.api_key == "session-abc"


@pytest.mark.asyncio
async def test_async_gateway_client():
    client = async_gateway_client(PAYLOAD)
    assert isinstance(client, openai.AsyncOpenAI)
    assert client.api_key == "session-abc"
    await client.close()


def test_missing_openai_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match="pip install"):
        gateway_client(PAYLOAD)


# -- rollout_entrypoint ------------------------------------------------------------------------

SESSION = "arl-" + "a" * 40
S3_BLOCK = {**PAYLOAD["_rollout"], "exp_id": "exp", "input_id": "row-1", "s3_bucket": "bucket"}


class RecordingS3:
    """Stands in for boto3's S3 client: records put_object calls."""

    def __init__(self):
        self.objects = {}
        self.written = threading.Event()

    def put_object(self, *, Bucket, Key, Body, ContentType):
        assert ContentType == "application/json"
        self.objects[(Bucket, Key)] = json.loads(Body)
        self.written.set()


def client_for(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent")


async def invoke(app, payload):
    async with client_for(app) as client:
        return await client.post(
            "/invocations",
            json=payload,
            headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": SESSION},
        )


async def ping(app):
    async with client_for(app) as client:
        return (await client.get("/ping")).json()["status"]


async def wait_for(event: threading.Event, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not event.is_set():
        assert time.monotonic() < deadline, "the background work did not finish"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_inline_mode_answers_with_the_result():
    app = BedrockAgentCoreApp()

    @rollout_entrypoint(app)
    def handler(payload, context):
        return {"x": payload["x"], "session_id": context.session_id}

    response = await invoke(app, {"x": 1, "_rollout": PAYLOAD["_rollout"]})
    assert response.json() == {"x": 1, "session_id": SESSION}
    # the function itself is returned unchanged, callable in unit tests
    assert handler({"x": 2}, types.SimpleNamespace(session_id="s")) == {"x": 2, "session_id": "s"}


@pytest.mark.asyncio
async def test_inline_mode_async_and_streaming_handlers():
    app = BedrockAgentCoreApp()

    @rollout_entrypoint(app)
    async def handler(payload):
        for step in range(2):
            yield {"step": step}

    response = await invoke(app, {"_rollout": PAYLOAD["_rollout"]})
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = response.text.splitlines()
    events = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert events == [{"step": 0}, {"step": 1}]


@pytest.mark.asyncio
async def test_s3_mode_accepts_at_once_reports_busy_then_writes_the_result():
    app, s3, release = BedrockAgentCoreApp(), RecordingS3(), threading.Event()

    @rollout_entrypoint(app, s3_client_factory=lambda: s3)
    def handler(payload, context):
        release.wait(5)
        return {"answer": payload["x"] * 2}

    response = await invoke(app, {"x": 4, "_rollout": S3_BLOCK})
    key = f"exp/row-1/{SESSION}.json"
    assert response.json() == {"status": "accepted", "s3_bucket": "bucket", "result_key": key}
    assert await ping(app) == "HealthyBusy"
    release.set()
    await wait_for(s3.written)
    assert s3.objects[("bucket", key)] == {"answer": 8, "status_code": 200}
    for _ in range(100):
        if await ping(app) == "Healthy":
            break
        await asyncio.sleep(0.01)
    assert await ping(app) == "Healthy"


@pytest.mark.asyncio
async def test_s3_mode_writes_an_error_result_when_the_handler_raises():
    app, s3 = BedrockAgentCoreApp(), RecordingS3()

    @rollout_entrypoint(app, s3_client_factory=lambda: s3)
    async def handler(payload):
        raise RuntimeError("tool crashed")

    block = {**S3_BLOCK, "result_key": "custom/key.json", "session_id": SESSION}
    response = await invoke(app, {"_rollout": block})
    assert response.json()["result_key"] == "custom/key.json"
    await wait_for(s3.written)
    document = s3.objects[("bucket", "custom/key.json")]
    assert document["status_code"] == 500
    assert document["error"] == "RuntimeError: tool crashed"
    assert "Traceback" in document["traceback"] and "tool crashed" in document["traceback"]


@pytest.mark.asyncio
async def test_s3_mode_keeps_a_generators_last_value():
    app, s3 = BedrockAgentCoreApp(), RecordingS3()

    @rollout_entrypoint(app, s3_client_factory=lambda: s3)
    def handler(payload):
        yield {"step": 0}
        yield "done"

    await invoke(app, {"_rollout": S3_BLOCK})
    await wait_for(s3.written)
    document = s3.objects[("bucket", f"exp/row-1/{SESSION}.json")]
    assert document == {"output": "done", "status_code": 200}


@pytest.mark.asyncio
async def test_s3_mode_without_its_ids_is_refused_naming_them():
    app = BedrockAgentCoreApp()

    @rollout_entrypoint(app, s3_client_factory=RecordingS3)
    def handler(payload):
        return {}

    response = await invoke(app, {"_rollout": {"s3_bucket": "bucket", "input_id": "r"}})
    assert response.status_code == 500
    assert "lacks exp_id" in response.text
