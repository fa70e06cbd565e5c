"""Faults on the way to and from AgentCore: what is resent, what is not, and what is stopped."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket

import pytest

from acr_stub import (
    INTERNAL,
    THROTTLED,
    UNAVAILABLE,
    Fault,
    load_agent_app,
    new_session_id,
    quick_runtime,
    serve,
    serve_data_plane,
)
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef

pytestmark = pytest.mark.asyncio

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/faults-Ab12Cd34Ef"
SILENT_ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/silent-Ab12Cd34Ef"
BUCKET = "arl-fault-results"  # the `aws` fixture (conftest.py) creates it
AGENT = AgentRef(task="test_faults", agent=None)


@pytest.fixture(scope="module")
def agents(aws):
    scripted, scripted_app = load_agent_app("scripted_agent.py")
    _, silent_app = load_agent_app("silent_s3_agent.py")
    servers = [serve(scripted_app), serve(silent_app)]
    yield scripted, {ARN: servers[0].url, SILENT_ARN: servers[1].url}
    for server in servers:
        server.stop()


@pytest.fixture
def stub(agents):
    with serve_data_plane(agents[1]) as plane:
        yield plane


@pytest.fixture
def calls(agents):
    return agents[0].calls


runtime = functools.partial(quick_runtime, arns={"*": ARN})


async def run(rt, payload, *, timeout_s=20.0, session_id=None):
    session_id = session_id or new_session_id()
    outcome = await rt.run_session(
        agent=AGENT, session_id=session_id, payload=payload, timeout_s=timeout_s
    )
    return session_id, outcome


async def test_throttling_then_success_runs_the_agent_once(stub, calls):
    stub.invoke_faults = [THROTTLED, THROTTLED]
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"x": 3})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result["answer"] == 6
    assert len(stub.invocations) == 3 and calls[session_id] == 1
    assert rt.stats["invoke_retries"] == 2


async def test_throttled_until_the_attempts_run_out_is_an_infra_error(stub):
    stub.invoke_faults = [THROTTLED] * 3
    rt = runtime(stub.url, max_invoke_attempts=3)
    session_id, outcome = await run(rt, {"x": 3})
    await rt.aclose()
    assert outcome.status is Status.INFRA_ERROR
    assert "ThrottlingException (HTTP 429, request id req-" in outcome.error
    assert "attempt 3 of at most 3" in outcome.error
    assert stub.stopped_sessions == {session_id}


async def test_unavailable_before_the_agent_ran_is_resent(stub, calls):
    stub.invoke_faults = [UNAVAILABLE]
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"x": 1})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert len(stub.invocations) == 2 and calls[session_id] == 1


async def test_500_after_the_agent_ran_is_not_resent(stub, calls):
    stub.invoke_faults = [Fault(500, "InternalServerException", "boom", after_agent=True)]
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"x": 1})
    await rt.aclose()
    assert outcome.status is Status.INFRA_ERROR
    assert "InternalServerException (HTTP 500, request id req-" in outcome.error
    assert "attempt 1 of at most 5" in outcome.error
    assert len(stub.invocations) == 1
    assert calls[session_id] == 1  # botocore did not resend either
    assert stub.stopped_sessions == {session_id}


async def test_a_plain_500_is_not_resent_because_the_agent_may_have_run(stub, calls):
    stub.invoke_faults = [INTERNAL]
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"x": 1})
    await rt.aclose()
    assert outcome.status is Status.INFRA_ERROR
    assert len(stub.invocations) == 1 and session_id not in calls


async def test_agent_http_500_is_an_agent_error(stub, calls):
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"mode": "raise", "x": 9})
    await rt.aclose()
    assert outcome.status is Status.AGENT_ERROR
    assert "RuntimeClientError (HTTP 424" in outcome.error
    assert calls[session_id] == 1 and len(stub.invocations) == 1


async def test_connection_refused_is_resent_then_an_infra_error(aws):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    rt = runtime(f"http://127.0.0.1:{closed_port}", max_invoke_attempts=3)
    _, outcome = await run(rt, {"x": 1})
    await rt.aclose()
    assert outcome.status is Status.INFRA_ERROR
    assert "could not connect" in outcome.error and "attempt 3 of at most 3" in outcome.error
    assert rt.stats["invoke_retries"] == 2


async def test_result_never_written_times_out_and_the_session_is_stopped(stub, aws):
    rt = runtime(
        stub.url, arns={"*": SILENT_ARN}, result_mode="s3", s3_bucket=BUCKET, exp_id="lost",
        s3_endpoint_url=aws,
    )
    session_id, outcome = await run(rt, {"x": 1}, timeout_s=0.6)
    await rt.aclose()
    assert outcome.status is Status.TIMEOUT
    assert f"s3://{BUCKET}/lost/test_faults/{session_id}.json was never written" in outcome.error
    assert "cold start included" in outcome.error
    assert stub.stopped_sessions == {session_id}


async def test_inline_timeout_stops_the_session_and_frees_the_invoke(stub):
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"mode": "sleep", "sleep_s": 1.5, "x": 1}, timeout_s=0.3)
    assert outcome.status is Status.TIMEOUT
    assert stub.stopped_sessions == {session_id}
    # The stop ended the in-flight invocation, so the next session starts at once.
    _, second = await run(rt, {"x": 2}, timeout_s=5)
    await rt.aclose()
    assert second.status is Status.COMPLETED, second.error


async def test_a_failing_stop_is_logged_and_the_run_goes_on(stub, caplog):
    stub.stop_faults = [
        Fault(403, "AccessDeniedException", "no bedrock-agentcore:StopRuntimeSession")
    ]
    rt = runtime(stub.url)
    caplog.set_level(logging.WARNING, logger="agentcore_rl_harness.runtimes.agentcore")
    session_id, outcome = await run(rt, {"x": 5})
    _, second = await run(rt, {"x": 6})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED and outcome.result["answer"] == 10
    assert second.status is Status.COMPLETED
    [warning] = [r for r in caplog.records if "could not stop" in r.getMessage()]
    assert session_id in warning.getMessage() and "AccessDeniedException" in warning.getMessage()
    assert rt.stats["stop_failures"] == 1


async def test_a_throttled_stop_is_resent(stub):
    stub.stop_faults = [THROTTLED]
    rt = runtime(stub.url)
    session_id, outcome = await run(rt, {"x": 5})
    await rt.aclose()
    assert outcome.status is Status.COMPLETED
    assert [s["session_id"] for s in stub.stops] == [session_id, session_id]
    assert rt.stats["stop_failures"] == 0


async def test_cancelling_a_batch_stops_every_live_session(stub):
    rt = runtime(stub.url, concurrency=4)
    session_ids = [new_session_id() for _ in range(4)]
    batch = asyncio.gather(
        *(run(rt, {"mode": "sleep", "sleep_s": 1.5, "x": 1}, session_id=s) for s in session_ids)
    )
    for _ in range(200):
        if len(stub.invocations) == 4:
            break
        await asyncio.sleep(0.01)
    assert rt.live_sessions == 4
    batch.cancel()  # what Ctrl-C does to the runner's tasks
    with pytest.raises(asyncio.CancelledError):
        await batch
    await rt.aclose()
    assert stub.stopped_sessions == set(session_ids)
    assert rt.live_sessions == 0


async def test_aclose_stops_sessions_still_running(stub):
    rt = runtime(stub.url, concurrency=2)
    session_ids = [new_session_id() for _ in range(2)]
    tasks = [
        asyncio.ensure_future(run(rt, {"mode": "sleep", "sleep_s": 1.5, "x": 1}, session_id=s))
        for s in session_ids
    ]
    for _ in range(200):
        if len(stub.invocations) == 2:
            break
        await asyncio.sleep(0.01)
    await rt.aclose()  # pytest teardown / Harness.close
    assert stub.stopped_sessions == set(session_ids)
    outcomes = [outcome for _, outcome in await asyncio.gather(*tasks)]
    assert all(o.status is not Status.COMPLETED for o in outcomes)
    assert len(stub.stops) == 2  # each session stopped once
