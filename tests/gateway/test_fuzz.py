"""Property-based fuzzing of the three wires over loopback, with bodies that reach past validation.

Bodies are built from valid multi-turn conversations with tool calls (internal form, translated
by each wire's `from_internal`), then sometimes broken by one mutation (a key dropped, a value
of the wrong type, a tool result for an unknown call, a string turned into a lone surrogate).
Properties: no 5xx; a 200 records exactly one turn (the sampler was called once, the session's
turn count moved by one, the reply is the sampler's); a 4xx records nothing and the session
serves the next good request. `FUZZ_EXAMPLES` (default 40) sets the examples per wire; run with
`-s` to see the counts of bodies tried and 5xx found.
"""

from __future__ import annotations

import collections
import copy
import json
import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcore_rl_harness.gateway import anthropic_wire, responses_wire
from agentcore_rl_harness.gateway.openai_wire import from_internal as chat_from_internal
from agentcore_rl_harness.gateway.server import GatewayConfig, GatewayServer
from agentcore_rl_harness.samplers.scripted import ScriptedSampler

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}},
         {"type": "function", "function": {"name": "echo", "parameters": {"type": "object", "properties": {}}}}]
REPLIES = ["Plain answer.", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
           "<think>hmm</think>Thought, then answered."]
TRICKY = ["<tool_call>", "</tool_call>", "<|im_end|>", "<|im_start|>", "<think>", "{\"name\": 1}", "\u0000",
          "\u2028", "😀", "\ufeff", "{{ x }}", "{% if %}"]

text = st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
                 st.lists(st.sampled_from(TRICKY), max_size=3).map("".join))
json_value = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | text,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=8)
arguments = st.dictionaries(st.text(min_size=1, max_size=6), json_value, max_size=3)


@st.composite
def conversations(draw):
    """Internal conversations the gateway must accept: system?, user / assistant(+calls) / tool
    results, ending where the next assistant turn is due (after a user message or tool results)."""
    messages = [{"role": "system", "content": draw(text)}] if draw(st.booleans()) else []
    call_number = 0
    for exchange in range(draw(st.integers(0, 3))):
        messages.append({"role": "user", "content": draw(text)})
        reply = {"role": "assistant", "content": draw(text)}
        if draw(st.booleans()):
            reply["reasoning"] = draw(text.filter(bool))
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            call_number += 1
            calls.append({"id": f"call_{call_number}", "type": "function", "function": {
                "name": draw(st.sampled_from(["add", "echo"])),
                "arguments": json.dumps(draw(arguments), ensure_ascii=False)}})
        if calls:
            reply["tool_calls"] = calls
        messages.append(reply)
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": draw(text)})
    if not messages or messages[-1]["role"] != "tool" or draw(st.booleans()):
        messages.append({"role": "user", "content": draw(text)})
    return messages


def wire_body(wire, messages, tools, extra):
    if wire == "chat":
        body = {"model": "m", "messages": chat_from_internal(messages)}
        if tools:
            body["tools"] = TOOLS
    elif wire == "responses":
        instructions, items = responses_wire.from_internal(messages)
        body = {"model": "m", "input": items, **({"instructions": instructions} if instructions else {})}
        if tools:
            body["tools"] = responses_wire.tools_from_internal(TOOLS)
    else:
        system, converted = anthropic_wire.from_internal(messages)
        body = {"model": "m", "max_tokens": 64, "messages": converted, **({"system": system} if system else {})}
        if tools:
            body["tools"] = anthropic_wire.tools_from_internal(TOOLS)
    return {**body, **extra}


def _paths(value, path=()):
    """Every (path, value) inside a JSON value."""
    yield path, value
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*path, index))


def _set(body, path, value):
    node = body
    for part in path[:-1]:
        node = node[part]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()


INTERESTING = {"messages", "input", "system", "instructions", "tools", "role", "type", "content", "text",
               "tool_calls", "function", "name", "arguments", "id", "tool_call_id", "tool_use_id", "call_id",
               "output", "thinking", "reasoning", "reasoning_content", "parameters", "input_schema"}
REPLACEMENTS = [_DELETE, "x", [5], 5, None, {}, [], "\ud800", "call_unknown", {"a": "b"}, [{}], True, 1e300]


@st.composite
def mutated(draw, body):
    """`body` with one or two parts dropped or replaced (a wrong type, an unknown id, a lone
    surrogate), the keys the wires read five times as likely to be hit as any other part."""
    body = json.loads(json.dumps(body))
    for _ in range(draw(st.integers(1, 2))):
        paths = [path for path, _ in _paths(body) if path]
        if not paths:
            break
        weighted = paths + [path for path in paths if path[-1] in INTERESTING] * 4
        replacement = draw(st.one_of(st.sampled_from(REPLACEMENTS), json_value))
        if replacement is not _DELETE:  # a copy: two mutations of one body must not share (or loop) a value
            replacement = copy.deepcopy(replacement)
        _set(body, draw(st.sampled_from(weighted)), replacement)
    return body


TALLY: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


@pytest.fixture(scope="module")
def fuzz_gateway(renderer):
    def reply(prompt_token_ids, params):
        return REPLIES[len(prompt_token_ids) % len(REPLIES)]

    sampler = ScriptedSampler(reply, encode=renderer.encode)
    with GatewayServer(sampler=sampler, renderer=renderer, model_id="m",
                       config=GatewayConfig(max_turns=None), context_window_tokens=4096) as server:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            yield server, sampler, client
    print("\nfuzz: bodies tried per wire and 5xx found:",
          {wire: dict(counts) for wire, counts in sorted(TALLY.items())})


GOOD = {"chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "responses": {"model": "m", "input": "hi"},
        "messages": {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}}


def _send(client, wire, session_id, body):
    content = json.dumps(body).encode()  # ASCII: a lone surrogate goes as the valid JSON escape "\\ud800"
    return client.post(PATHS[wire], content=content, headers={
        "Authorization": f"Bearer {session_id}", "content-type": "application/json"})


def check_one(fuzz_gateway, wire, body):
    server, sampler, client = fuzz_gateway
    session_id = server.sessions.open()
    session = server.sessions.get(session_id)
    calls_before = len(sampler.calls)
    response = _send(client, wire, session_id, body)
    TALLY[wire]["tried"] += 1
    TALLY[wire]["5xx"] += response.status_code >= 500
    TALLY[wire][str(response.status_code)] += 1
    assert response.status_code < 500, response.text
    if response.status_code == 200:
        assert len(sampler.calls) == calls_before + 1 and session.turn_count == 1
        if body.get("stream") is True:
            end = {"chat": "data: [DONE]", "responses": "event: response.", "messages": "event: message_stop"}
            assert end[wire] in response.text and "event: error" not in response.text, response.text[-300:]
        else:
            assert response.json()["usage"]
    else:
        assert 400 <= response.status_code < 500, response.text
        assert len(sampler.calls) == calls_before and session.turn_count == 0
        error = response.json()
        assert error["error"]["message"] if "error" in error else False, error
        follow_up = _send(client, wire, session_id, GOOD[wire])
        assert follow_up.status_code == 200, follow_up.text
        assert session.turn_count == 1
    finished = server.sessions.finish(session_id)
    assert finished.turns == 1 and len(finished.traces) == 1


extras = st.fixed_dictionaries({}, optional={
    "stream": st.booleans(), "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1),
    "max_tokens": st.integers(1, 10**9), "seed": st.integers(0, 2**31)})


@pytest.mark.parametrize("wire", sorted(PATHS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_bodies_never_5xx_and_are_recorded_exactly(fuzz_gateway, wire, data):
    body = wire_body(wire, data.draw(conversations(), label="conversation"), data.draw(st.booleans()),
                     data.draw(extras, label="extra"))
    if data.draw(st.booleans(), label="mutate"):
        body = data.draw(mutated(body), label="mutated")
    check_one(fuzz_gateway, wire, body)
