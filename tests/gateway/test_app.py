"""The gateway over loopback, driven by the real openai SDK with a scripted sampler."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from agentcore_rl_harness.gateway.server import GatewayConfig, GatewayServer
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.samplers.scripted import ScriptedSampler

TOOLS = [
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "integer"}, "b": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "mul", "description": "Multiply two integers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "integer"}, "b": {"type": "integer"}}}}},
]
TWO_CALLS = ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
             '<tool_call>\n{"name": "mul", "arguments": {"a": 3, "b": 4}}\n</tool_call>')
ONE_CALL = 'Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 12}}\n</tool_call>'
FINAL = "The answer is 15."


def logprob(position, token_id):
    return -0.001 * (position + 1) - token_id * 1e-7


@pytest.fixture
def start_gateway(renderer):
    servers = []

    def start(replies, **kwargs):
        sampler = ScriptedSampler(replies, encode=renderer.encode, logprob=logprob)
        server = GatewayServer(sampler=sampler, renderer=renderer, model_id="smollm2-test", **kwargs).start()
        servers.append(server)
        return server, sampler

    yield start
    for server in servers:
        server.stop()


def sampled_ids(renderer, im_end, text):
    return [*renderer.encode(text), im_end]


def check_exact_trace(trace, sampler, replies, renderer, im_end):
    """Prompts are prefixes of the trace; each reply's sampled ids sit right after its prompt."""
    assert trace.token_ids[:trace.prompt_length] == sampler.calls[0].prompt_token_ids
    expected_mask = [0] * (len(trace.token_ids) - trace.prompt_length)
    for call, text in zip(sampler.calls, replies, strict=True):
        prompt = call.prompt_token_ids
        ids = sampled_ids(renderer, im_end, text)
        assert trace.token_ids[:len(prompt)] == prompt
        assert list(trace.token_ids[len(prompt):len(prompt) + len(ids)]) == ids
        start = len(prompt) - trace.prompt_length
        expected_mask[start:start + len(ids)] = [1] * len(ids)
        assert list(trace.logprobs[start:start + len(ids)]) == [logprob(i, t) for i, t in enumerate(ids)]
    assert list(trace.loss_mask) == expected_mask
    assert all(lp is None for m, lp in zip(trace.loss_mask, trace.logprobs) if m == 0)


def test_sync_client_linear_tool_conversation_gives_one_exact_trace(start_gateway, renderer, im_end):
    replies = [TWO_CALLS, ONE_CALL, FINAL]
    server, sampler = start_gateway(replies)
    session_id = server.sessions.open()
    assert len(session_id) >= 33
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    messages = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "(1+2)*4 + 3?"}]

    first = client.chat.completions.create(model="any", messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]
    assert len({c.id for c in calls}) == 2
    assert first.usage.prompt_tokens == len(sampler.calls[0].prompt_token_ids)
    assert first.usage.completion_tokens == len(sampled_ids(renderer, im_end, TWO_CALLS))
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "3"},
                 {"role": "tool", "tool_call_id": calls[1].id, "content": "12"}]

    second = client.chat.completions.create(model="any", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "Adding."
    messages += [second.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": second.choices[0].message.tool_calls[0].id, "content": "15"}]
    third = client.chat.completions.create(model="any", messages=messages, tools=TOOLS)
    assert third.choices[0].message.content == FINAL and third.choices[0].finish_reason == "stop"

    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_exact_trace(trace, sampler, replies, renderer, im_end)
    assert finished.turns == 3
    assert finished.metadata["tool_calls"] == 3 and finished.metadata["forks"] == 0
    assert finished.metadata["drift_events"] == 0
    assert finished.usage.completion_tokens == sum(trace.loss_mask)


@pytest.mark.asyncio
async def test_async_streaming_parallel_tool_calls(start_gateway, renderer, im_end):
    replies = [TWO_CALLS, FINAL]
    server, sampler = start_gateway(replies)
    session_id = server.sessions.open()
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    messages = [{"role": "user", "content": "(1+2) and 3*4?"}]

    calls, finish, usage = {}, None, None
    stream = await client.chat.completions.create(model="any", messages=messages, tools=TOOLS, stream=True,
                                                  stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or ():
                entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = delta.id or entry["id"]
                entry["name"] += delta.function.name or ""
                entry["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and sorted(calls) == [0, 1]
    assert [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in (0, 1)] == [
        ("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]
    assert usage.completion_tokens == len(sampled_ids(renderer, im_end, TWO_CALLS))
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[i]["id"], "type": "function",
         "function": {"name": calls[i]["name"], "arguments": calls[i]["arguments"]}} for i in (0, 1)]})
    messages += [{"role": "tool", "tool_call_id": calls[0]["id"], "content": "3"},
                 {"role": "tool", "tool_call_id": calls[1]["id"], "content": "12"}]

    text = ""
    async with await client.chat.completions.create(model="any", messages=messages, tools=TOOLS,
                                                    stream=True) as stream:
        async for chunk in stream:
            text += "".join(c.delta.content or "" for c in chunk.choices)
    assert text == FINAL
    await client.close()

    (trace,) = server.sessions.finish(session_id).traces
    check_exact_trace(trace, sampler, replies, renderer, im_end)


@pytest.mark.asyncio
async def test_async_client_non_streaming(start_gateway):
    server, _ = start_gateway(["hi there"])
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.sessions.open(), max_retries=0)
    reply = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hi there" and reply.model == "smollm2-test"
    await client.close()


def test_edited_history_forks_with_original_tokens_still_trained(start_gateway, renderer, im_end):
    server, sampler = start_gateway([TWO_CALLS, "It is 3 and 12.", "It is 3 and 13."])
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    messages = [{"role": "user", "content": "go"}]
    first = client.chat.completions.create(model="any", messages=messages, tools=TOOLS).choices[0].message
    history = [*messages, first.model_dump(exclude_none=True)]
    for result in ("12", "13"):
        client.chat.completions.create(model="any", tools=TOOLS, messages=[
            *history, {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "3"},
            {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": result}])
    finished = server.sessions.finish(session_id)
    original, forked = finished.traces
    first_ids = sampled_ids(renderer, im_end, TWO_CALLS)
    start = len(sampler.calls[0].prompt_token_ids)
    for trace in (original, forked):
        assert list(trace.token_ids[start:start + len(first_ids)]) == first_ids
    assert original.loss_mask[:len(first_ids)] == (1,) * len(first_ids)
    assert forked.loss_mask[:len(first_ids)] == (0,) * len(first_ids)
    assert forked.logprobs[:len(first_ids)] == original.logprobs[:len(first_ids)]
    assert finished.metadata["forks"] == 1
    assert sum(original.loss_mask) + sum(forked.loss_mask) == finished.usage.completion_tokens


def test_unknown_and_finished_keys_are_rejected(start_gateway):
    server, _ = start_gateway(["ok", "never"])
    unknown = openai.OpenAI(base_url=server.base_url, api_key="not-a-session", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        unknown.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["code"] == "invalid_api_key"
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
    server.sessions.finish(session_id)
    with pytest.raises(openai.AuthenticationError, match="finished"):
        client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])


def test_x_api_key_header_and_error_statuses(start_gateway):
    server, _ = start_gateway(["ok"], config=GatewayConfig(max_body_bytes=2048))
    session_id = server.sessions.open()
    url = server.base_url + "/chat/completions"
    headers = {"X-Api-Key": session_id}
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 4096}]}
    response = httpx.post(url, json=big, headers=headers)
    assert response.status_code == 413 and "limit of 2048 bytes" in response.json()["error"]["message"]
    chunked = httpx.post(url, content=iter([json.dumps(big).encode()]), headers=headers)  # no length
    assert chunked.status_code == 413
    bad = httpx.post(url, content=b"{not json", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    no_messages = httpx.post(url, json={"model": "m"}, headers=headers)
    assert no_messages.status_code == 400 and "messages" in no_messages.json()["error"]["message"]
    assert httpx.post(url, json={"messages": []}).status_code == 401
    ok = httpx.post(url, json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, headers=headers)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"


def test_tools_with_a_template_without_tool_format_is_a_clear_400(smol_tokenizer):
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer

    plain = ChatTemplateRenderer(smol_tokenizer, chat_template=(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"))
    with GatewayServer(sampler=ScriptedSampler(["x"], encode=plain.encode), renderer=plain, model_id="m") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.sessions.open(), max_retries=0)
        with pytest.raises(openai.BadRequestError, match="no known tool format"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)


def test_admin_api_and_session_sampling_wins(start_gateway, renderer, im_end):
    server, sampler = start_gateway(["a long reply that will be cut", "another long reply"], admin_token="secret-token")
    admin = server.base_url.removesuffix("/v1") + "/admin/sessions"
    assert httpx.post(admin, json={}).status_code == 401
    assert httpx.post(admin, json={}, headers={"X-Admin-Token": "wrong"}).status_code == 401
    headers = {"X-Admin-Token": "secret-token"}
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_tokens": 4, "stop": ["<|endoftext|>"], "seed": 3}
    opened = httpx.post(admin, json={"session_id": "s" * 40, "sampling": sampling}, headers=headers)
    assert opened.status_code == 201 and opened.json() == {"session_id": "s" * 40}
    assert httpx.post(admin, json={"session_id": "s" * 40}, headers=headers).status_code == 409
    assert httpx.post(admin, json={"sampling": {"temprature": 1}}, headers=headers).status_code == 400

    client = openai.OpenAI(base_url=server.base_url, api_key="s" * 40, max_retries=0)
    cut = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                         temperature=1.5, max_tokens=100)
    assert cut.choices[0].finish_reason == "length"
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}], max_tokens=2)
    params = [call.params for call in sampler.calls]
    assert params[0] == SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_tokens=4,
                                       stop_token_ids=(im_end, 0), seed=3)
    assert params[1].max_tokens == 2 and params[1].temperature == 0.7

    finished = httpx.post(f"{admin}/{'s' * 40}/finish", headers=headers)
    assert finished.status_code == 200
    body = finished.json()
    assert body["turns"] == 2 and len(body["traces"]) == 2
    assert body["metadata"]["sampling_overrides"] == {"max_tokens": 1, "temperature": 1}
    assert body["metadata"]["truncated"] == 2
    assert set(body["traces"][0]) == {"token_ids", "prompt_length", "loss_mask", "logprobs", "finish_reason", "metadata"}
    assert httpx.post(f"{admin}/{'s' * 40}/finish", headers=headers).status_code == 409
    assert httpx.delete(f"{admin}/{'s' * 40}").status_code == 401
    assert httpx.delete(f"{admin}/{'s' * 40}", headers=headers).status_code == 204
    assert httpx.delete(f"{admin}/{'s' * 40}", headers=headers).status_code == 404

    generated = httpx.post(admin, headers=headers).json()["session_id"]
    assert len(generated) >= 33 and server.sessions.get(generated).sampling == SamplingParams()  # the server's default


def test_models_and_health(start_gateway):
    server, _ = start_gateway([])
    client = openai.OpenAI(base_url=server.base_url, api_key="anything", max_retries=0)
    assert [m.id for m in client.models.list()] == ["smollm2-test"]
    health = httpx.get(server.base_url.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")


def test_chat_stream_is_incremental_and_never_leaks_tool_markup(start_gateway):
    reply = "<think>\nPlan it.\n</think>\nLet me add these numbers.\n" + TWO_CALLS
    server, _ = start_gateway([reply])
    client = openai.OpenAI(base_url=server.base_url, api_key=server.sessions.open(), max_retries=0)
    content, reasoning, calls = [], [], {}
    for chunk in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                tools=TOOLS, stream=True):
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
            if getattr(choice.delta, "reasoning_content", None):
                reasoning.append(choice.delta.reasoning_content)
            for delta in choice.delta.tool_calls or ():
                calls.setdefault(delta.index, []).append(delta)
    assert "".join(content) == "Let me add these numbers." and len(content) > 3
    assert "".join(reasoning) == "Plan it." and sorted(calls) == [0, 1]
    assert not any("<" in part for part in content)
