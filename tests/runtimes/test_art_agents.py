"""Real agentcore-rl-toolkit 0.2.0 agents, unchanged, on every runtime and result mode.

`AgentCoreRLApp` + `@app.rollout_entrypoint` (answers at once, works in the background, saves
its result to S3 only when `_rollout` carries exp_id/input_id/s3_bucket) and
`AgentCoreRuntimeApp` (addressable start/get invocations), each on the local runtime (real
processes) and on the agentcore runtime (real boto3 -> loopback data-plane stub -> the agent
served over HTTP; S3 is moto's real S3 server) in the inline, s3 and start_get result modes.
"""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

pytest.importorskip("agentcore_rl_toolkit", reason="pip install --no-deps agentcore-rl-toolkit==0.2.0")

from acr_stub import (  # noqa: E402
    agent_ref,
    fake_model_app,
    load_agent_app,
    new_session_id,
    serve,
    serve_data_plane,
)
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.records import Status  # noqa: E402
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime  # noqa: E402
from agentcore_rl_harness.runtimes.base import AgentRef  # noqa: E402
from agentcore_rl_harness.runtimes.local import LocalRuntime  # noqa: E402

pytestmark = pytest.mark.asyncio

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/art-Ab12Cd34Ef"
BUCKET = "arl-art-results"  # the `aws` fixture (conftest.py) creates it
S3_TRIPLE = {"exp_id", "input_id", "s3_bucket"}


@pytest.fixture(scope="module")
def model():
    """An OpenAI-compatible model endpoint that answers `#### 42` and records each call."""
    seen: list[dict] = []
    server = serve(fake_model_app(seen))
    yield server.url, seen
    server.stop()


def payload(model_url: str, session_id: str, **extra) -> dict:
    return {
        "prompt": "6 * 7?",
        "answer": "42",
        **extra,
        "_rollout": {
            "base_url": model_url + "/v1",
            "model_id": "policy",
            "api_key": session_id,
            "sampling_params": {"max_tokens": 16},
        },
    }


def called_with(seen: list[dict], session_id: str) -> bool:
    return any(call["authorization"] == f"Bearer {session_id}" for call in seen)


# -- local runtime -------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def local():
    rt = LocalRuntime(LocalRuntimeConfig(concurrency=2, startup_timeout_s=30), kill_grace_s=0.5)
    yield rt
    await rt.aclose()


async def test_local_rl_app_in_the_inline_mode_is_an_agent_error_naming_the_result_mode(local, model):
    url, seen = model
    session_id = new_session_id()
    outcome = await local.run_session(
        agent=agent_ref("art_rl_app_agent.py"), session_id=session_id,
        payload=payload(url, session_id), timeout_s=60,
    )
    # no S3 triple was sent, so ART did not answer 500: it answered "processing" and keeps its
    # result only in S3, which the inline mode never reads: not a silent `{}`, but the fix
    assert outcome.status is Status.AGENT_ERROR, outcome
    assert "answered {'status': 'processing'} at once" in outcome.error
    assert "Use --agentcore-rl-set runtime.result_mode=s3 (the local runtime receives it" in outcome.error


@pytest.mark.parametrize("mode", ["s3", "start_get"])
async def test_local_result_modes_for_every_art_app(model, mode):
    """s3: the RL app's PutObject lands in the local runtime's loopback stand-in for S3 (no AWS);
    start_get: the runtime app's background invocation is read back with get."""
    url, seen = model
    rt = LocalRuntime(LocalRuntimeConfig(concurrency=3, startup_timeout_s=30, result_mode=mode), kill_grace_s=0.5)
    try:
        outcomes = {}
        for agent in ("art_rl_app_agent.py", "art_runtime_app_agent.py", "art_background_app_agent.py"):
            session_id = new_session_id()
            outcomes[agent] = await rt.run_session(
                agent=AgentRef(task="t", agent=agent_ref(agent).agent, input_id="row-3"),
                session_id=session_id, payload=payload(url, session_id), timeout_s=60,
            )
            if outcomes[agent].status is Status.COMPLETED:
                assert called_with(seen, session_id)
    finally:
        await rt.aclose()
    runtime_app = {"answer": "42", "rewards": {"exact": 1.0}}
    for agent in ("art_runtime_app_agent.py", "art_background_app_agent.py"):
        assert outcomes[agent].status is Status.COMPLETED, outcomes[agent].error
        assert outcomes[agent].result == runtime_app
    rl_app = outcomes["art_rl_app_agent.py"]
    if mode == "s3":
        assert rl_app.status is Status.COMPLETED, rl_app.error
        assert rl_app.result["rewards"] == [1.0] and rl_app.result["answer"] == "42"
    else:  # start_get: ART's RL app ignores the envelope and answers "processing": no result
        assert rl_app.status is Status.AGENT_ERROR and "runtime.result_mode=s3" in rl_app.error


@pytest.mark.parametrize("agent", ["art_runtime_app_agent.py", "art_background_app_agent.py"])
async def test_local_runtime_app_answers_inline_or_through_get(local, model, agent):
    url, seen = model
    session_id = new_session_id()
    outcome = await local.run_session(
        agent=agent_ref(agent), session_id=session_id, payload=payload(url, session_id),
        timeout_s=60,
    )
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": "42", "rewards": {"exact": 1.0}}
    assert called_with(seen, session_id)


async def test_local_background_invocation_that_fails_is_an_agent_error(local, model):
    url, _ = model
    session_id = new_session_id()
    outcome = await local.run_session(
        agent=agent_ref("art_background_app_agent.py"), session_id=session_id,
        payload=payload(url, session_id, fail=True), timeout_s=60,
    )
    assert outcome.status is Status.AGENT_ERROR
    assert "ended completed: runtime-app agent failed on purpose" in outcome.error


# -- agentcore runtime ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agents(aws):
    """Each ART agent served over HTTP, as ACR runs its container (in-process, on loopback)."""
    servers = {name: serve(load_agent_app(f"{name}.py")[1])
               for name in ("art_rl_app_agent", "art_runtime_app_agent", "art_background_app_agent")}
    yield {name: server.url for name, server in servers.items()}
    for server in servers.values():
        server.stop()


async def run_acr(agent_url, model_url, aws, mode, **extra):
    with serve_data_plane({ARN: agent_url}) as plane:
        options = {"result_mode": mode, "poll_initial_s": 0.05, "poll_max_s": 0.2}
        if mode == "s3":
            options.update(s3_bucket=BUCKET, s3_endpoint_url=aws, exp_id="exp-art")
        rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"test_art": ARN}, endpoint_url=plane.url, **options))
        session_id = new_session_id()
        try:
            outcome = await rt.run_session(
                agent=AgentRef(task="test_art", agent=None, input_id="row-1"),
                session_id=session_id, payload=payload(model_url, session_id, **extra),
                timeout_s=30,
            )
        finally:
            await rt.aclose()
        bodies = [json.loads(call["body"]) for call in plane.invocations]
        return outcome, session_id, bodies, plane


async def test_acr_s3_rl_app_result_comes_from_s3(agents, model, aws):
    outcome, session_id, bodies, plane = await run_acr(agents["art_rl_app_agent"], model[0], aws, "s3")
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result["rewards"] == [1.0] and outcome.result["reward"] == 1.0
    assert S3_TRIPLE <= set(bodies[0]["_rollout"])
    assert bodies[0]["_rollout"]["input_id"] == "row-1"
    assert plane.stopped_sessions == {session_id}


@pytest.mark.parametrize("mode", ["inline", "start_get"])
async def test_acr_rl_app_outside_s3_mode_is_a_clear_agent_error(agents, model, aws, mode):
    outcome, _, bodies, _ = await run_acr(agents["art_rl_app_agent"], model[0], aws, mode)
    assert not S3_TRIPLE & set(bodies[0]["_rollout"])  # so ART did not answer 500
    assert outcome.status is Status.AGENT_ERROR
    assert "Use --agentcore-rl-set runtime.result_mode=s3" in outcome.error


@pytest.mark.parametrize("mode", ["inline", "s3", "start_get"])
@pytest.mark.parametrize("agent", ["art_runtime_app_agent", "art_background_app_agent"])
async def test_acr_runtime_app_in_every_result_mode(agents, model, aws, mode, agent):
    outcome, session_id, bodies, plane = await run_acr(agents[agent], model[0], aws, mode)
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": "42", "rewards": {"exact": 1.0}}
    assert called_with(model[1], session_id)
    gets = [b for b in bodies if b.get("_agentcore_runtime", {}).get("operation") == "get"]
    if mode == "start_get":
        assert bodies[0]["_agentcore_runtime"]["operation"] == "start"
    if mode == "start_get" or agent == "art_background_app_agent":
        assert gets, "the result was read back with get invocations on the same session"
    assert {call["session_id"] for call in plane.invocations} == {session_id}
    assert plane.stopped_sessions == {session_id}


async def test_acr_start_get_failure_is_an_agent_error(agents, model, aws):
    outcome, *_ = await run_acr(agents["art_runtime_app_agent"], model[0], aws, "start_get", fail=True)
    assert outcome.status is Status.AGENT_ERROR
    assert "runtime-app agent failed on purpose" in outcome.error
