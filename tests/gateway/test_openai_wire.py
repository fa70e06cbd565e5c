"""Wire translation (pure): chat, responses and anthropic <-> the internal form, round trips."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore_rl_harness.gateway import anthropic_wire, openai_wire, responses_wire
from agentcore_rl_harness.gateway.messages import chat_tools

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
nonempty = text.filter(bool)
arguments = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), text, st.booleans()),
                            max_size=3).map(lambda d: json.dumps(d, ensure_ascii=False))
call = st.builds(lambda i, n, a: {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}},
                 st.integers(0, 10**6), nonempty, arguments)


@st.composite
def conversations(draw):
    """Internal conversations: system?, then user / assistant(+tools) turns in a valid order, a
    turn sometimes opened by a system message (as Claude Code sends one inside `messages`)."""
    messages = [{"role": "system", "content": draw(nonempty)}] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 3)) == 0:
            messages.append({"role": "system", "content": draw(nonempty)})
        messages.append({"role": "user", "content": draw(text)})
        reply = {"role": "assistant", "content": draw(text)}
        if draw(st.booleans()):
            reply["reasoning"] = draw(nonempty)
        calls = draw(st.lists(call, max_size=3))
        if calls:
            reply["tool_calls"] = calls
            messages.append(reply)
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": draw(text)} for c in calls]
        else:
            messages.append(reply)
    return messages


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_chat_round_trip(messages):
    assert openai_wire.to_internal(openai_wire.from_internal(messages)) == messages


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_responses_round_trip(messages):
    instructions, items = responses_wire.from_internal(messages)
    assert responses_wire.to_internal(items, instructions) == messages


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_anthropic_round_trip(messages):
    system, converted = anthropic_wire.from_internal(messages)
    assert anthropic_wire.to_internal(system, converted) == messages


def test_the_same_conversation_is_the_same_internal_form_on_every_wire():
    chat = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
            {"role": "assistant", "content": None, "reasoning_content": "easy",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":2, "b":2}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"}]
    responses = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
                 {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "easy"}]},
                 {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "add", "arguments": '{"a": 2, "b": 2}',
                  "status": "completed"},
                 {"type": "function_call_output", "call_id": "c1", "output": "4"}]
    claude = [{"role": "user", "content": "2+2?"},
              {"role": "assistant", "content": [{"type": "thinking", "thinking": "easy", "signature": "s"},
                                                {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 2, "b": 2}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "4"}]}]}]
    internal = openai_wire.to_internal(chat)
    assert internal == responses_wire.to_internal(responses, "Be brief.")
    assert internal == anthropic_wire.to_internal([{"type": "text", "text": "Be brief."}], claude)
    assert internal[2]["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": 2}'


def test_tools_translate_to_the_same_internal_tools():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = chat_tools([{"type": "function", "function": {"name": "f", "description": "d", "parameters": schema,
                                                         "strict": True}}])
    assert chat == responses_wire.tools_to_internal([{"type": "function", "name": "f", "description": "d",
                                                      "parameters": schema, "strict": True}])
    assert chat == anthropic_wire.tools_to_internal([{"name": "f", "description": "d", "input_schema": schema}])
    assert anthropic_wire.tools_from_internal(chat) == [{"name": "f", "description": "d", "input_schema": schema}]


def test_error_shapes():
    assert openai_wire.error_json("bad key", type="invalid_request_error", code="invalid_api_key") == {
        "error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key", "param": None}}
    assert anthropic_wire.error_json(429, "slow down") == {
        "type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


def test_request_model_accepts_unknown_fields():
    request = openai_wire.ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": True,
         "stop": "x", "max_completion_tokens": 5})
    assert request.stop == "x" and request.max_completion_tokens == 5 and not request.stream
    assert request.model_extra == {"parallel_tool_calls": True}
