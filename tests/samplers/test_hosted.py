"""sampler=hosted: a hosted chat model every gateway turn passes through (evaluation baselines).

Bedrock's Converse API is faked with botocore's `Stubber` (which validates each request and
response against the service model); the OpenAI-compatible failure paths run against real
loopback HTTP servers. The happy path against a real OpenAI-compatible server is in
test_vllm_real.py (a real vLLM)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import openai
import pytest
from botocore.stub import Stubber

from agentcore_rl_harness.errors import ConfigError, SamplingError
from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
from agentcore_rl_harness.gateway.server import GatewayServer
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.samplers.bedrock import BedrockChat
from agentcore_rl_harness.samplers.hosted import HostedSettings, NoTokens, check_mode
from agentcore_rl_harness.samplers.hosted_factory import build_hosted

MODEL = "amazon.nova-lite-v1:0"
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}}]
SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=64)


@pytest.fixture
def bedrock():
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _gateway(tokenizer, chat):
    return GatewayServer(sampler=NoTokens(chat.describe()), renderer=ChatTemplateRenderer(tokenizer),
                         model_id="policy", sampling=SAMPLING, chat=chat)


def _converse_reply(blocks, stop, tokens=(11, 5)):
    return {"output": {"message": {"role": "assistant", "content": blocks}}, "stopReason": stop,
            "usage": {"inputTokens": tokens[0], "outputTokens": tokens[1], "totalTokens": sum(tokens)},
            "metrics": {"latencyMs": 10}}


def test_bedrock_turns_pass_through_converse_and_capture_no_tokens(tiny_tokenizer, bedrock):
    client, stubber = bedrock
    chat = BedrockChat(HostedSettings(provider="bedrock", model=MODEL), client=client)
    inference = {"maxTokens": 64, "temperature": 0.7, "topP": 0.9}
    tool_config = {"tools": [{"toolSpec": {"name": "add", "description": "Add two numbers.",
                                           "inputSchema": {"json": TOOLS[0]["function"]["parameters"]}}}]}
    system = [{"text": "Use the add tool."}]
    question = {"role": "user", "content": [{"text": "What is 2+3?"}]}
    stubber.add_response("converse", _converse_reply(
        [{"toolUse": {"toolUseId": "tu1", "name": "add", "input": {"a": 2, "b": 3}}}], "tool_use"), {
        "modelId": MODEL, "messages": [question], "system": system, "inferenceConfig": inference,
        "toolConfig": tool_config})
    with _gateway(tiny_tokenizer, chat) as server:
        session_id = server.sessions.open()
        agent = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
        messages = [{"role": "system", "content": "Use the add tool."}, {"role": "user", "content": "What is 2+3?"}]
        first = agent.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls
        assert first.choices[0].finish_reason == "tool_calls"
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
        # the next turn carries the wire's call id back as Converse's toolUse / toolResult ids
        stubber.add_response("converse", _converse_reply([{"text": "2+3 is 5."}], "end_turn", (30, 6)), {
            "modelId": MODEL, "system": system, "inferenceConfig": inference, "toolConfig": tool_config,
            "messages": [question,
                         {"role": "assistant", "content": [{"toolUse": {"toolUseId": call.id, "name": "add",
                                                                        "input": {"a": 2, "b": 3}}}]},
                         {"role": "user", "content": [{"toolResult": {"toolUseId": call.id, "content": [{"text": "5"}]}}]}]})
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "5"}]
        chunks = list(agent.chat.completions.create(model="policy", messages=messages, tools=TOOLS, stream=True))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finished = server.sessions.finish(session_id)
    assert streamed == "2+3 is 5."
    assert finished.traces == () and finished.turns == 2 and finished.metadata["passthrough_turns"] == 2
    assert (finished.usage.prompt_tokens, finished.usage.completion_tokens) == (41, 11)  # as Bedrock counted


@pytest.mark.parametrize(("code", "message", "expected"), [
    ("ResourceNotFoundException", "Model not found", f"hosted model '{MODEL}' not found on Bedrock"),
    ("ValidationException", "The provided model identifier is invalid.", f"hosted model '{MODEL}' not found"),
    ("AccessDeniedException", "not authorized", "refused the AWS credentials"),
])
def test_bedrock_failures_are_clear_errors_and_the_agent_gets_a_502(tiny_tokenizer, bedrock, code, message, expected):
    client, stubber = bedrock
    stubber.add_client_error("converse", service_error_code=code, service_message=message, http_status_code=400)
    chat = BedrockChat(HostedSettings(provider="bedrock", model=MODEL), client=client)
    with _gateway(tiny_tokenizer, chat) as server:
        agent = openai.OpenAI(base_url=server.base_url, api_key=server.sessions.open(), max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            agent.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502 and expected in str(caught.value)


def test_bedrock_without_credentials_or_region_is_refused_at_start(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError, match="no AWS credentials found; export AWS_ACCESS_KEY_ID"):
        build_hosted(HostedSettings(provider="bedrock", model=MODEL, region="us-east-1"))


class _Endpoint(BaseHTTPRequestHandler):
    status, body = 200, {}

    def do_GET(self):  # noqa: N802 - the http.server API
        data = json.dumps(self.body).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        return None


@pytest.fixture
def endpoint():
    servers = []

    def serve(status, body):
        handler = type("Handler", (_Endpoint,), {"status": status, "body": body})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_openai_endpoint_failures_stop_the_run_before_any_rollout(endpoint, monkeypatch):
    monkeypatch.setenv("ARL_TEST_HOSTED_KEY", "sk-wrong")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    with pytest.raises(ConfigError, match=rf"endpoint {closed} is not reachable .*check sampler.hosted.url"):
        build_hosted(HostedSettings(model="m", url=closed))
    refusing = endpoint(401, {"error": {"message": "Incorrect API key provided"}})
    with pytest.raises(ConfigError, match=r"refused the key in \$ARL_TEST_HOSTED_KEY \(HTTP 401.*export a valid key"):
        build_hosted(HostedSettings(model="m", url=refusing, api_key_env="ARL_TEST_HOSTED_KEY"))
    serving = endpoint(200, {"object": "list", "data": [{"id": "served-model", "object": "model"}]})
    with pytest.raises(ConfigError, match=r"model='gpt-x' is not served at .*lists \['served-model'\]"):
        build_hosted(HostedSettings(model="gpt-x", url=serving))
    chat, no_tokens = build_hosted(HostedSettings(model="served-model", url=serving))
    chat.close()


def test_settings_are_checked_and_the_backend_has_no_token_access():
    with pytest.raises(ConfigError, match="needs sampler.hosted.model"):
        build_hosted(HostedSettings())
    with pytest.raises(ConfigError, match=r"provider='azure'; valid choices: \['openai', 'bedrock'\]"):
        build_hosted(HostedSettings(provider="azure", model="m"))
    import asyncio

    with pytest.raises(SamplingError, match="no token-level access"):
        asyncio.run(NoTokens("m at u").sample(prompt_token_ids=[1, 2], params=SAMPLING))


@pytest.mark.parametrize("mode", ["run", "train", "collect"])
def test_training_on_a_hosted_model_is_refused(mode):
    with pytest.raises(ConfigError, match=f"--agentcore-rl {mode} with sampler=hosted: .*nothing to train on"):
        check_mode("hosted", mode)
    check_mode("hosted", "eval")
    check_mode("hf", mode)
