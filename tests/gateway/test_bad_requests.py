"""Hostile and careless request bodies over loopback: each one a 4xx in the wire's own error shape
that names what was wrong, and the session still serves the next good request."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from agentcore_rl_harness.gateway.server import GatewayConfig

CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
GOOD = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def chat(*messages):
    return {"model": "m", "messages": list(messages)}


def anth(*messages):
    return {"model": "m", "max_tokens": 8, "messages": list(messages)}


def resp(*items):
    return {"model": "m", "input": list(items)}


USER = {"role": "user", "content": "hi"}
BAD_BODIES = [
    # (wire, body, words the message must hold)
    ("chat", chat(USER, {"role": "assistant", "content": None, "tool_calls": "x"}), "tool_calls"),
    ("chat", chat(USER, {"role": "assistant", "content": None, "tool_calls": [5]}), "tool_calls[0]"),
    ("chat", chat(USER, {"role": "assistant", "tool_calls": [{"id": "c", "function": "add"}]}),
     "tool_calls[0].function"),
    ("chat", chat(USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                              "function": {"arguments": "{}"}}]}), "name"),
    ("chat", chat(USER, {"role": "tool", "tool_call_id": "nope", "content": "3"}), "answers no tool call"),
    ("chat", chat(USER, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_9", "content": "3"}), "'call_9' answers no tool call"),
    ("chat", chat(USER, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "3"},
                  {"role": "tool", "tool_call_id": "call_1", "content": "3"}), "answers no tool call"),
    ("chat", chat({"role": "user", "content": [{"type": "text"}]}), "messages[0].content"),
    ("chat", chat({"role": "wizard", "content": "hi"}), "wizard"),
    ("chat", chat({"role": "tool", "content": "3"}), "tool_call_id"),
    ("chat", chat(), "messages"),
    ("chat", {"model": "m", "messages": [USER], "max_tokens": "lots"}, "max_tokens"),
    ("messages", anth(USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": "a=1"}]}), "input"),
    ("messages", anth({"role": "user", "content": [{"type": "text"}]}), "messages[0].content[0].text"),
    ("messages", anth({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "3"}]}), "tool_use_id 'toolu_x'"),
    ("messages", anth(USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2"}]}), "answers no tool call"),
    ("messages", anth({"role": "tool", "content": "hi"}, USER), "role"),
    ("messages", anth({"role": "system", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}, USER),
     "messages[0]: system content block 'tool_result' is not supported (text blocks only"),
    ("messages", anth({"role": "system", "content": [{"type": "image", "source": {}}]}, USER), "'image'"),
    ("messages", anth({"role": "system", "content": 5}, USER), "messages[0].content"),
    ("messages", {"model": "m", "max_tokens": 8, "messages": [USER], "system": 5}, "system"),
    ("responses", resp({"type": "function_call_output", "call_id": "call_x", "output": "3"}),
     "call_id 'call_x'"),
    ("responses", resp({"type": "function_call", "call_id": "c", "name": "add", "arguments": {"a": 1}}),
     "arguments"),
    ("responses", resp({"role": "user", "content": [{"type": "input_text"}]}), "input[0].content"),
    ("responses", resp({"type": "message", "content": "hi"}), "role"),
    ("responses", {"model": "m", "input": 7}, "input"),
    # found by the fuzz (a 500 before): a reasoning part whose `text` is not a string
    ("responses", resp({"type": "reasoning", "summary": [{"type": "summary_text", "text": ["x"]}]}, USER),
     "input[0].summary[0].text"),
    ("responses", resp({"type": "reasoning", "content": [{"type": "reasoning_text", "text": 5}]}, USER),
     "input[0].content[0].text"),
]


@pytest.fixture
def gateway(gateway_factory):
    server, _ = gateway_factory(["ok"] * 100, config=GatewayConfig(max_turns=None))
    return server


def post(server, session_id, wire, body=None, content=None):
    return httpx.post(server.base_url + PATHS[wire], json=body, content=content,
                      headers={"Authorization": f"Bearer {session_id}", "content-type": "application/json"})


def assert_wire_error(wire, response, *words):
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    if wire == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        assert body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    for word in words:
        assert word in message, message
    return body


@pytest.mark.parametrize(("wire", "body", "words"), BAD_BODIES,
                         ids=[f"{w}-{i}" for i, (w, _, _) in enumerate(BAD_BODIES)])
def test_malformed_and_inconsistent_bodies_are_400s_and_the_session_lives_on(gateway, wire, body, words):
    session_id = gateway.sessions.open()
    assert_wire_error(wire, post(gateway, session_id, wire, body), words)
    assert post(gateway, session_id, wire, GOOD[wire]).status_code == 200
    assert gateway.sessions.get(session_id).turn_count == 1


@pytest.mark.parametrize("wire", sorted(PATHS))
def test_lone_surrogates_and_deep_nesting_are_400s(gateway, wire):
    session_id = gateway.sessions.open()
    surrogate = (b'{"model": "m", "max_tokens": 8, "input": "\\ud800", '
                 b'"messages": [{"role": "user", "content": "\\udc00 hi"}]}')
    assert_wire_error(wire, post(gateway, session_id, wire, content=surrogate), "lone surrogate")
    deep = b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert_wire_error(wire, post(gateway, session_id, wire, content=deep), "nested deeper")
    nested: list = []
    for _ in range(100):  # valid JSON, within orjson's own limit, beyond the gateway's
        nested = [nested]
    nested = {**GOOD[wire], "metadata": {"a": nested}}
    assert_wire_error(wire, post(gateway, session_id, wire, nested), "nested deeper")
    assert post(gateway, session_id, wire, GOOD[wire]).status_code == 200


def test_a_paired_surrogate_is_fine(gateway):
    session_id = gateway.sessions.open()
    body = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00 NaN", "x": NaN}]}'
    assert post(gateway, session_id, "chat", content=body).status_code == 200


def test_lenient_history_accepts_what_the_real_apis_refuse(gateway_factory):
    server, _ = gateway_factory(["ok"], config=GatewayConfig(lenient_history=True))
    session_id = server.sessions.open()
    body = chat(USER, {"role": "tool", "tool_call_id": "nope", "content": "3"})
    assert post(server, session_id, "chat", body).status_code == 200


def test_over_context_prompts_are_400_context_length_exceeded_on_every_wire(gateway_factory, renderer):
    server, sampler = gateway_factory(["ok"] * 10, context_window_tokens=64)
    session_id = server.sessions.open()
    long = "word " * 200
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": long}])
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 64 tokens" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input=long)
    assert caught.value.code == "context_length_exceeded"
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": long}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is too long" in caught.value.body["error"]["message"]
    assert sampler.calls == []
    # a prompt that fits gets its max_tokens lowered to the room the window leaves, and is served
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=10_000)
    assert reply.choices[0].message.content == "ok"
    assert sampler.calls[0].params.max_tokens == 64 - len(sampler.calls[0].prompt_token_ids)
    finished = server.sessions.finish(session_id)
    assert finished.metadata["context_length_exceeded"] == 3 and finished.turns == 1


def test_admin_session_with_max_tokens_beyond_the_context_is_refused(gateway_factory):
    server, _ = gateway_factory(["ok"], context_window_tokens=8192, admin_token="t")
    admin = server.base_url.removesuffix("/v1") + "/admin/sessions"
    refused = httpx.post(admin, json={"sampling": {"max_tokens": 10**9}}, headers={"X-Admin-Token": "t"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "max_tokens_exceeds_context"
    assert "at most 8191" in refused.json()["error"]["message"]
    assert httpx.post(admin, json={"sampling": {"max_tokens": 8191}}, headers={"X-Admin-Token": "t"}).status_code == 201
