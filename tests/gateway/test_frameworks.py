"""Agent frameworks, unmodified, against the gateway: Strands (`OpenAIModel`) and LangChain
(`ChatOpenAI`), plus one session driven over all three wires folding into one trace."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

ADD_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 12}}\n</tool_call>'
FINAL = "The answer is 15."


def test_strands_agent_with_openai_model(gateway_factory, check_trace):
    strands = pytest.importorskip("strands", reason="pip install strands-agents")
    from strands.models.openai import OpenAIModel

    @strands.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    replies = [ADD_CALL, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    model = OpenAIModel(client_args={"base_url": server.base_url, "api_key": session_id, "max_retries": 0},
                        model_id="smollm2-test")
    agent = strands.Agent(model=model, tools=[add], callback_handler=None, system_prompt="Use tools.")
    result = agent("What is 3 + 12?")
    assert str(result).strip() == FINAL
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert finished.metadata["tool_calls"] == 1 and finished.metadata["forks"] == 0


def test_langchain_chat_openai_tool_loop(gateway_factory, check_trace):
    pytest.importorskip("langchain_openai", reason="pip install langchain-openai")
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    replies = [ADD_CALL, FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    llm = ChatOpenAI(base_url=server.base_url, api_key=session_id, model="smollm2-test", max_retries=0,
                     streaming=True).bind_tools([add])
    messages = [SystemMessage("Use tools."), HumanMessage("What is 3 + 12?")]
    while True:
        reply = llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(ToolMessage(str(add.invoke(call["args"])), tool_call_id=call["id"]))
    assert reply.content == FINAL
    (trace,) = server.sessions.finish(session_id).traces
    check_trace(trace, sampler.calls, replies)


def test_one_session_over_three_wires_is_one_trace(gateway_factory, check_trace):
    replies = [ADD_CALL, "Now doubling.\n" + ADD_CALL.replace('"a": 3, "b": 12', '"a": 15, "b": 15'), FINAL]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers",
                                               "parameters": {"type": "object", "properties": {
                                                   "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    chat = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    first = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "3+12, doubled?"}],
                                         tools=tools).choices[0].message
    call = first.tool_calls[0]
    second = chat.responses.create(model="m", tools=[{"type": "function", **tools[0]["function"]}], input=[
        {"role": "user", "content": "3+12, doubled?"},
        {"type": "function_call", "call_id": call.id, "name": "add", "arguments": call.function.arguments},
        {"type": "function_call_output", "call_id": call.id, "output": "15"}])
    message, fc = second.output
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    third = claude.messages.create(model="m", max_tokens=100, tools=[
        {"name": "add", "description": "Add two integers", "input_schema": tools[0]["function"]["parameters"]}],
        messages=[{"role": "user", "content": "3+12, doubled?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": "add",
                                                     "input": json.loads(call.function.arguments)}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "15"}]},
                  {"role": "assistant", "content": [
                      {"type": "text", "text": message.content[0].text},
                      {"type": "tool_use", "id": fc.call_id, "name": fc.name, "input": json.loads(fc.arguments)}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": fc.call_id, "content": "30"}]}])
    assert third.content[0].text == FINAL
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert finished.metadata["forks"] == 0 and finished.metadata["drift_events"] == 0
