"""`judges/clients.py` and `judges/config.py`: Bedrock Converse through botocore's Stubber (the
real request and response shapes), and the errors a wrong judge config gives."""

import asyncio

import boto3
import pytest
from botocore.stub import Stubber

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError, JudgeError
from agentcore_rl_harness.judges.clients import BedrockJudge, OpenAIJudge, build_client, identity
from agentcore_rl_harness.judges.config import JudgeConfig
from agentcore_rl_harness.judges.protocol import POINTWISE_SYSTEM
from agentcore_rl_harness.judges.service import JudgeService

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def _converse(text, inputs=40, outputs=9):
    return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "end_turn",
            "usage": {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": inputs + outputs},
            "metrics": {"latencyMs": 5}}


def test_bedrock_converse_is_asked_with_the_system_prompt_apart_and_its_usage_counted(tmp_path):
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    config = JudgeConfig(kind="bedrock", model=MODEL, retries=1)
    service = JudgeService(config, identity=identity(config, policy_model=None),
                           client=lambda: BedrockJudge(config, client=client), cache_dir=None, usage_dir=tmp_path)
    with Stubber(client) as stub:
        expected = {"modelId": MODEL, "inferenceConfig": {"maxTokens": 512, "temperature": 0.0},
                    "system": [{"text": POINTWISE_SYSTEM}],
                    "messages": [{"role": "user", "content": [{"text": "Rubric:\nr\n\nThe agent's work:\nt"}]}]}
        stub.add_response("converse", _converse("a fine answer"), expected)
        stub.add_response("converse", _converse('{"score": 0.5, "reason": "half"}'))
        assert asyncio.run(service.score(rubric="r", transcript="t")) == 0.5
        stub.assert_no_pending_responses()
    line = (tmp_path / "usage.jsonl").read_text()
    assert '"prompt_tokens": 80' in line and '"completion_tokens": 18' in line and '"attempts": 2' in line


def test_a_bedrock_error_is_retried_then_a_judge_error(tmp_path):
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    config = JudgeConfig(kind="bedrock", model=MODEL, retries=1)
    service = JudgeService(config, identity="bedrock:m", client=lambda: BedrockJudge(config, client=client),
                           cache_dir=None, usage_dir=None)
    with Stubber(client) as stub:
        for _ in range(2):
            stub.add_client_error("converse", "ThrottlingException", "slow down", 429)
        with pytest.raises(JudgeError, match="ThrottlingException"):
            asyncio.run(service.score(rubric="r", transcript="t"))


@pytest.mark.parametrize("override, message", [
    ("roles.judge.kind=gpt", "roles.judge.kind='gpt' is not supported; valid choices"),
    ("roles.judge.kind=openai", "roles.judge.kind=openai needs roles.judge.model"),
    ("roles.judge.retries=-1", "roles.judge.retries=-1 must be >= 0"),
    ("roles.judge.concurrency=0", "roles.judge.concurrency=0 must be >= 1"),
    ("roles.judge.price.prompt_per_mtok=-1", "roles.judge.price.prompt_per_mtok=-1.0 must be >= 0"),
    ("roles.judge.modle=x", "did you mean `model`"),
])
def test_a_bad_judge_config_is_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compose_config([override])


def test_an_openai_judge_without_its_key_says_which_variable_to_set(monkeypatch):
    monkeypatch.delenv("MY_JUDGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="environment variable MY_JUDGE_KEY, which is not set"):
        OpenAIJudge(JudgeConfig(kind="openai", model="m", api_key_env="MY_JUDGE_KEY"))


def test_a_policy_judge_without_a_loaded_policy_says_what_to_use_instead():
    with pytest.raises(ConfigError, match="no policy is loaded here"):
        build_client(JudgeConfig(), policy=None)
