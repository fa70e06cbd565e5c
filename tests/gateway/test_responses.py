"""The Responses wire driven by the real openai SDK: JSON, `stream=True`, `responses.stream()`."""

from __future__ import annotations

import json

import openai
import pytest

TOOLS = [{"type": "function", "name": "add", "description": "Add two integers",
          "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}},
         {"type": "function", "name": "mul", "description": "Multiply two integers",
          "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
TWO_CALLS = ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
             '<tool_call>\n{"name": "mul", "arguments": {"a": 3, "b": 4}}\n</tool_call>')
THINK_CALL = '<think>\nI add first.\n</think>\nAdding now.\n<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 12}}\n</tool_call>'
FINAL = "The answer is 15."


def test_json_tool_calls_then_final_answer_is_one_exact_trace(gateway_factory, check_trace):
    replies = [TWO_CALLS, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    history = [{"role": "user", "content": "(1+2) and 3*4?"}]
    first = client.responses.create(model="m", instructions="Use tools.", input=history, tools=TOOLS)
    assert first.status == "completed" and first.output_text == ""
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]
    assert first.usage.input_tokens == len(sampler.calls[0].prompt_token_ids)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "3"},
                {"type": "function_call_output", "call_id": calls[1].call_id, "output": "12"}]
    second = client.responses.create(model="m", instructions="Use tools.", input=history, tools=TOOLS,
                                     max_output_tokens=64)
    assert second.output_text == FINAL
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert finished.metadata["tool_calls"] == 2 and finished.metadata["forks"] == 0


def test_stream_true_events_in_order_and_previous_response_id(gateway_factory, check_trace):
    replies = [THINK_CALL, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    events = list(client.responses.create(model="m", input="3+12?", tools=TOOLS, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.content_part.added") \
        < kinds.index("response.output_text.delta") < kinds.index("response.function_call_arguments.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Adding now."
    assert "<tool_call>" not in "".join(getattr(e, "delta", "") for e in events)
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].content[0].text == "I add first."
    call = final.output[2]
    follow = client.responses.create(model="m", previous_response_id=final.id, tools=TOOLS,
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "15"}])
    assert follow.output_text == FINAL
    (trace,) = server.sessions.finish(session_id).traces
    check_trace(trace, sampler.calls, replies)


@pytest.mark.asyncio
async def test_responses_stream_helper_and_incomplete(gateway_factory):
    server, sampler = gateway_factory(["Hello there, friend.", "a long reply that is cut short here"])
    session_id = server.sessions.open()
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    deltas = []
    async with client.responses.stream(model="m", input="hi") as stream:
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    assert final.output_text == "Hello there, friend." == "".join(deltas) and len(deltas) > 1
    cut = await client.responses.create(model="m", input="again", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert sampler.calls[1].params.max_tokens == 3
    await client.close()


def test_errors_are_openai_shaped(gateway_factory):
    server, _ = gateway_factory([])
    client = openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.responses.create(model="m", input="hi")
    assert caught.value.body["code"] == "invalid_api_key"
    client = openai.OpenAI(base_url=server.base_url, api_key=server.sessions.open(), max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="hi", previous_response_id="resp_unknown")
    with pytest.raises(openai.BadRequestError, match="input_image"):
        client.responses.create(model="m", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://x/y.png"}]}])
