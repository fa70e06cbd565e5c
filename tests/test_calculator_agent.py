"""The bundled calculator agent: its tool, and its tool loop end to end through the local runtime.

The model is a scripted OpenAI-compatible stub on loopback, so the test shows the full loop
(model asks for the tool, the agent runs it in its own process, sends the result back as a
`tool` message, the model answers) without the gateway or a real model.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import threading
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.local import LocalRuntime

AGENT_FILE = Path(__file__).resolve().parents[1] / "agents" / "calculator.py"


@pytest.fixture(scope="module")
def calculator():
    spec = importlib.util.spec_from_file_location("bundled_calculator_agent", AGENT_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the tool ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("37 + 48", "85"),
        ("91 - 17", "74"),
        ("(2 + 3) * 4", "20"),
        ("84 / 4", "21"),
        ("7 / 2", "3.5"),
        ("-5 + 2", "-3"),
        (" 12+7 ", "19"),
        ("((1))", "1"),
    ],
)
def test_calculate_values(calculator, expression, expected):
    assert calculator.calculate(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "abs(-1)",
        "x + 1",
        "2 ** 10",
        "9 ** 9 ** 9",
        "1.5 + 1",
        "True + 1",
        "'a' * 3",
        "[1, 2]",
        "1 / 0",
        "9" * 40,
        "1" + " + 1" * 100,
        "(10 ** 20) * (10 ** 20)",
        "",
    ],
)
def test_calculate_rejects(calculator, expression):
    with pytest.raises(ValueError):
        calculator.calculate(expression)


def test_huge_products_are_rejected(calculator):
    with pytest.raises(ValueError, match="too large"):
        calculator.calculate(" * ".join(["99999"] * 8))


def test_tool_errors_are_messages_for_the_model(calculator):
    assert calculator.run_tool_call("calculator", '{"expression": "2 + 2"}') == "4"
    assert calculator.run_tool_call("calculator", '{"expression": "2 ** 2"}').startswith("error:")
    assert calculator.run_tool_call("calculator", "not json").startswith("error:")
    assert calculator.run_tool_call("calculator", '{"expr": "1"}').startswith("error:")
    assert "unknown tool" in calculator.run_tool_call("search", "{}")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 85.", 85),
        ("37 + 48 = 85", 85),
        ("It is -3", -3),
        ("75-43 is 32", 32),
        ("no number", None),
        ("", None),
    ],
)
def test_last_integer(calculator, text, expected):
    assert calculator.last_integer(text) == expected


# --- the agent end to end --------------------------------------------------------------------


class ScriptedModel:
    """An OpenAI Chat Completions stub: first a calculator call, then an answer with its result."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])

    async def complete(self, request: Request) -> JSONResponse:
        body = await request.json()
        body["authorization"] = request.headers.get("authorization")
        self.requests.append(body)
        last = body["messages"][-1]
        question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        if "always tool" in question and last["role"] == "tool":
            return await self._tool_again(body)
        if last["role"] == "tool":
            message = {"role": "assistant", "content": f"The answer is {last['content']}."}
            finish = "stop"
        elif "directly" in question:
            message = {"role": "assistant", "content": "I think it is 12."}
            finish = "stop"
        else:
            expression = re.search(r"\d+ [-+] \d+", question).group(0)
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{len(self.requests)}",
                        "type": "function",
                        "function": {
                            "name": "calculator",
                            "arguments": json.dumps({"expression": expression}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        return JSONResponse(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    async def _tool_again(self, body: dict) -> JSONResponse:
        call = {
            "id": f"call_{len(self.requests)}",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "1 + 1"}'},
        }
        return JSONResponse(
            {
                "id": "chatcmpl-loop",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "finish_reason": "tool_calls",
                    }
                ],
            }
        )


@pytest.fixture(scope="module")
def model_server():
    """The stub served by uvicorn on a loopback port, in a background thread."""
    model = ScriptedModel()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(model.app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.01)
    model.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    yield model
    server.should_exit = True
    thread.join(5)


async def run_agent(model_server, prompt: str, session_id: str):
    model_server.requests.clear()
    runtime = LocalRuntime(LocalRuntimeConfig(), kill_grace_s=0.5)
    payload = {
        "prompt": prompt,
        "_rollout": {
            "base_url": model_server.base_url,
            "model_id": "smollm2-135m-instruct",
            "api_key": session_id,
            "sampling_params": {},
        },
    }
    try:
        return await runtime.run_session(
            agent=AgentRef(task="arith", agent=str(AGENT_FILE)),
            session_id=session_id,
            payload=payload,
            timeout_s=30,
        )
    finally:
        await runtime.aclose()


@pytest.mark.asyncio
async def test_agent_tool_loop_end_to_end(model_server):
    outcome = await run_agent(model_server, "What is 37 + 48?", "session-calc-1")

    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {
        "answer": 85,
        "reply": "The answer is 85.",
        "tool_calls": 1,
        "turns": 2,
    }
    first, second = model_server.requests
    for request in (first, second):
        assert request["authorization"] == "Bearer session-calc-1"
        assert request["model"] == "smollm2-135m-instruct"
        assert request["max_tokens"] == 96
        assert "temperature" not in request
        assert [tool["function"]["name"] for tool in request["tools"]] == ["calculator"]
    assert first["messages"][0]["role"] == "system"
    # worked examples are real turns, in the same tool-call shape the model should produce
    examples = first["messages"][1:-1]
    assert any(m["role"] == "assistant" and m.get("tool_calls") for m in examples)
    assert any(m["role"] == "tool" for m in examples)
    assert first["messages"][-1] == {"role": "user", "content": "What is 37 + 48?"}
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": '{"expression": "37 + 48"}',
    }
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "85"}


@pytest.mark.asyncio
async def test_agent_answering_without_the_tool(model_server):
    outcome = await run_agent(model_server, "Answer directly: what is 5 + 7?", "session-calc-2")
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {
        "answer": 12, "reply": "I think it is 12.", "tool_calls": 0, "turns": 1
    }


@pytest.mark.asyncio
async def test_agent_stops_after_three_model_calls(model_server):
    outcome = await run_agent(model_server, "always tool: what is 1 + 1?", "session-calc-3")
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": None, "reply": "", "tool_calls": 3, "turns": 3}
    assert len(model_server.requests) == 3


@pytest.mark.asyncio
async def test_agent_outside_the_harness_is_an_agent_error(model_server):
    runtime = LocalRuntime(LocalRuntimeConfig(), kill_grace_s=0.5)
    try:
        outcome = await runtime.run_session(
            agent=AgentRef(task="arith", agent=str(AGENT_FILE)),
            session_id="s",
            payload={"prompt": "What is 1 + 1?"},
            timeout_s=30,
        )
    finally:
        await runtime.aclose()
    assert outcome.status is Status.AGENT_ERROR
    assert "_rollout" in outcome.error
