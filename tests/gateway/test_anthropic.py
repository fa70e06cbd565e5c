"""The Anthropic Messages wire driven by the real anthropic SDK (Bearer key, as SDK 2.x sends it)."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from agentcore_rl_harness.gateway import GatewayConfig

TOOLS = [{"name": "add", "description": "Add two integers",
          "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}},
         {"name": "mul", "description": "Multiply two integers",
          "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
THINK_TWO_CALLS = ('<think>\nTwo calls.\n</think>\nCalling.\n'
                   '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
                   '<tool_call>\n{"name": "mul", "arguments": {"a": 3, "b": 4}}\n</tool_call>')
FINAL = "It is 3 and 12."


def base_url(server):
    return server.base_url.removesuffix("/v1")


def test_tool_use_thinking_and_tool_result_give_one_exact_trace(gateway_factory, check_trace):
    replies = [THINK_TWO_CALLS, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = anthropic.Anthropic(base_url=base_url(server), api_key=session_id, max_retries=0)
    messages = [{"role": "user", "content": "(1+2) and 3*4?"}]
    first = client.messages.create(model="m", max_tokens=200, system="Use tools.", messages=messages, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert first.content[0].thinking == "Two calls." and first.content[1].text == "Calling."
    uses = first.content[2:]
    assert [(u.name, u.input) for u in uses] == [("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]
    assert first.usage.input_tokens == len(sampler.calls[0].prompt_token_ids)
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": uses[0].id, "content": "3"},
                     {"type": "tool_result", "tool_use_id": uses[1].id, "content": [{"type": "text", "text": "12"}]}]}]
    counted = client.messages.count_tokens(model="m", system="Use tools.", messages=messages, tools=TOOLS)
    second = client.messages.create(model="m", max_tokens=200, system=[{"type": "text", "text": "Use tools."}],
                                    messages=messages, tools=TOOLS)
    assert second.stop_reason == "end_turn" and second.content[0].text == FINAL
    assert counted.input_tokens == len(sampler.calls[1].prompt_token_ids) == second.usage.input_tokens
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert finished.metadata["tool_calls"] == 2 and finished.metadata["forks"] == 0


def test_system_messages_inside_messages_are_system_turns_in_place(gateway_factory, check_trace, renderer):
    """Claude Code sends `system`-role messages inside `messages` (beside the top-level `system`):
    each is a system turn where it stands, as on the chat wire, and the session is one exact
    trace when the agent re-sends them and adds one mid-session."""
    from agentcore_rl_harness.gateway import anthropic_wire

    replies = [THINK_TWO_CALLS, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = anthropic.Anthropic(base_url=base_url(server), api_key=session_id, max_retries=0)
    messages = [{"role": "system", "content": [{"type": "text", "text": "Answer "}, {"type": "text", "text": "briefly."}]},
                {"role": "user", "content": "(1+2) and 3*4?"}]
    first = client.messages.create(model="m", max_tokens=200, system="Use tools.", messages=messages, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    internal = [{"role": "system", "content": "Use tools."}, {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "(1+2) and 3*4?"}]
    tools = anthropic_wire.tools_to_internal(TOOLS)
    assert list(sampler.calls[0].prompt_token_ids) == renderer.encode(renderer.render(internal, tools=tools))
    uses = first.content[2:]
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}
                                              for use, result in zip(uses, ["3", "12"])]},
                 {"role": "system", "content": "Both tools answered."}]
    counted = client.messages.count_tokens(model="m", system="Use tools.", messages=messages, tools=TOOLS)
    second = client.messages.create(model="m", max_tokens=200, system="Use tools.", messages=messages, tools=TOOLS)
    assert second.content[0].text == FINAL
    assert counted.input_tokens == len(sampler.calls[1].prompt_token_ids)
    assert renderer.decode(sampler.calls[1].prompt_token_ids).endswith(
        "</tool_response><|im_end|>\n<|im_start|>system\nBoth tools answered.<|im_end|>\n<|im_start|>assistant\n")
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert finished.metadata["forks"] == 0


def test_messages_stream_helper_sends_blocks_incrementally(gateway_factory, check_trace, renderer):
    replies = [THINK_TWO_CALLS, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = anthropic.Anthropic(base_url=base_url(server), api_key=session_id, max_retries=0)
    messages = [{"role": "user", "content": "(1+2) and 3*4?"}]
    kinds, texts = [], []
    with client.messages.stream(model="m", max_tokens=200, messages=messages, tools=TOOLS) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "text":
                texts.append(event.text)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "".join(texts) == "Calling." and "<tool_call>" not in "".join(texts)
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[0].thinking == "Two calls." and final.stop_reason == "tool_use"
    assert final.content[3].input == {"a": 3, "b": 4}
    assert final.usage.output_tokens == len(renderer.encode(THINK_TWO_CALLS)) + 1
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": final.content[2].id, "content": "3"},
                     {"type": "tool_result", "tool_use_id": final.content[3].id, "content": "12"}]}]
    with client.messages.stream(model="m", max_tokens=200, messages=messages, tools=TOOLS) as stream:
        assert stream.get_final_text() == FINAL
    (trace,) = server.sessions.finish(session_id).traces
    check_trace(trace, sampler.calls, replies)


def test_max_tokens_stop_reason_and_x_api_key(gateway_factory):
    server, sampler = gateway_factory(["a long reply that will be cut"])
    session_id = server.sessions.open()
    client = anthropic.Anthropic(base_url=base_url(server), api_key="ignored", max_retries=0,
                                 default_headers={"Authorization": "", "X-Api-Key": session_id})
    reply = client.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}],
                                   stop_sequences=["x"], extra_body={"temperature": 1.7})
    assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 3
    metadata = server.sessions.finish(session_id).metadata
    assert metadata["sampling_overrides"] == {"stop": 1, "temperature": 1}


def test_errors_are_anthropic_shaped(gateway_factory):
    server, _ = gateway_factory([], config=GatewayConfig(max_body_bytes=1024))
    client = anthropic.Anthropic(base_url=base_url(server), api_key="unknown", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": caught.value.body["error"]["message"]}}
    session_id = server.sessions.open()
    client = anthropic.Anthropic(base_url=base_url(server), api_key=session_id, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="image"):
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}])
    big = httpx.post(base_url(server) + "/v1/messages", headers={"X-Api-Key": session_id},
                     json={"messages": [{"role": "user", "content": "x" * 2048}]})
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
    assert [m.id for m in client.models.list()] == ["smollm2-test"]
