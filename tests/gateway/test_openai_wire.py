"""OpenAI wire translation: request model, response JSON and SSE chunks (pure functions)."""

from __future__ import annotations

import json

from agentcore_rl_harness.gateway import openai_wire as wire
from agentcore_rl_harness.gateway.rendering import ParsedReply, ToolCall
from agentcore_rl_harness.records import Usage

TWO_CALLS = ParsedReply(content="", tool_calls=(ToolCall("add", {"a": 1}), ToolCall("mul", {"b": "é"})))


def test_request_model_accepts_unknown_fields():
    request = wire.ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": True,
         "stop": "x", "max_completion_tokens": 5})
    assert request.stop == "x" and request.max_completion_tokens == 5 and not request.stream
    assert request.model_extra == {"parallel_tool_calls": True}


def test_completion_json_with_tool_calls():
    body = wire.completion_json(completion_id="chatcmpl-1", created=1, model="m", reply=TWO_CALLS,
                                call_ids=["call_a", "call_b"], finish="tool_calls", usage=Usage(10, 4))
    message = body["choices"][0]["message"]
    assert message["content"] is None and message["role"] == "assistant"
    assert [c["id"] for c in message["tool_calls"]] == ["call_a", "call_b"]
    assert json.loads(message["tool_calls"][1]["function"]["arguments"]) == {"b": "é"}
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "tool_calls"


def test_finish_reason_mapping():
    assert wire.finish_reason(TWO_CALLS, "stop") == "tool_calls"
    assert wire.finish_reason(TWO_CALLS, "length") == "length"
    assert wire.finish_reason(ParsedReply(content="x"), "stop") == "stop"


def test_stream_events_order_and_tool_call_indexes():
    reply = ParsedReply(content="Calling.", reasoning="think", tool_calls=TWO_CALLS.tool_calls)
    events = wire.stream_events(completion_id="c", created=1, model="m", reply=reply,
                                call_ids=["call_a", "call_b"], finish="tool_calls", usage=Usage(3, 2))
    assert events[-1] == wire.DONE and all(e.startswith("data: ") and e.endswith("\n\n") for e in events)
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"reasoning_content": "think"} and deltas[2] == {"content": "Calling."}
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [c["index"] for c in calls] == [0, 0, 1, 1]
    assert calls[0]["id"] == "call_a" and calls[2]["function"]["name"] == "mul"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 5


def test_error_json_shape():
    assert wire.error_json("bad key", type="invalid_request_error", code="invalid_api_key") == {
        "error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key", "param": None}}
