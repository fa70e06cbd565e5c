"""Agent-side helpers: reading `_rollout` and building gateway clients."""

from __future__ import annotations

import dataclasses
import sys

import openai
import pytest

from agentcore_rl_harness.agent import (
    RolloutConfig,
    async_gateway_client,
    gateway_client,
    rollout_config,
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
