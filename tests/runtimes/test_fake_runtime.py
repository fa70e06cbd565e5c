"""`runtimes/fake.py`: what a handler's answer, exception or slowness makes of a session."""

import asyncio

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import SessionOutcome, Status
from agentcore_rl_harness.runtimes.base import AgentRef, AgentRuntime
from agentcore_rl_harness.runtimes.fake import FakeRuntime

AGENT = AgentRef(task="t", agent="agent.py", input_id="r0")
PAYLOAD = {"q": 1, "_rollout": {"base_url": "http://127.0.0.1:1/v1", "api_key": "arl-k"}}


def _run(runtime, timeout_s=5.0):
    return asyncio.run(runtime.run_session(agent=AGENT, session_id="arl-k", payload=PAYLOAD, timeout_s=timeout_s))


def test_a_dict_is_the_agents_result_and_each_session_is_recorded():
    runtime = FakeRuntime(lambda session: {"echo": session.payload["q"], "key": session.api_key})
    outcome = _run(runtime)
    assert isinstance(runtime, AgentRuntime)
    assert (outcome.status, outcome.result, outcome.error) == (Status.COMPLETED, {"echo": 1, "key": "arl-k"}, None)
    assert [s.session_id for s in runtime.sessions] == ["arl-k"]
    assert runtime.sessions[0].base_url == "http://127.0.0.1:1/v1" and runtime.sessions[0].agent == AGENT


def test_async_handlers_and_outcomes_as_given():
    given = SessionOutcome(Status.TASK_FAILED, None, "said so", 0.0)

    async def handler(session):
        await asyncio.sleep(0)
        return given

    assert _run(FakeRuntime(handler)) is given


def test_an_exception_is_the_agents_failure_and_a_harness_error_propagates():
    def crash(session):
        raise ValueError("boom")

    outcome = _run(FakeRuntime(crash))
    assert outcome.status is Status.AGENT_ERROR and outcome.error == "ValueError: boom"

    def infra(session):
        raise HarnessError("runtime down")

    with pytest.raises(HarnessError, match="runtime down"):
        _run(FakeRuntime(infra))


def test_a_slow_handler_times_out_and_a_non_object_is_an_agent_error():
    async def slow(session):
        await asyncio.sleep(5)

    outcome = _run(FakeRuntime(slow), timeout_s=0.05)
    assert outcome.status is Status.TIMEOUT and "0.05s" in outcome.error
    assert _run(FakeRuntime(lambda session: [1, 2])).status is Status.AGENT_ERROR


def test_live_sessions_count_and_a_closed_runtime_refuses():
    seen = []
    runtime = FakeRuntime(lambda session: seen.append(runtime.live_sessions) or {})
    _run(runtime)
    assert seen == [1] and runtime.live_sessions == 0
    asyncio.run(runtime.aclose())
    with pytest.raises(HarnessError, match="closed"):
        _run(runtime)
