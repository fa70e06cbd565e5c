"""Every runtime reports the same outcome for the same scripted agent.

The same agent file runs on the `local` runtime (its own process) and on the `agentcore`
runtime (boto3 -> local data-plane stub -> the agent over HTTP), with results inline and
through S3 (moto). Statuses must match; completed results must be equal.
"""

from __future__ import annotations

import secrets

import pytest
import pytest_asyncio

from acr_stub import AGENTS, load_agent_app, serve, serve_data_plane
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.local import LocalRuntime

pytestmark = pytest.mark.asyncio(loop_scope="module")

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/conform-Ab12Cd34Ef"
BUCKET = "arl-conformance"  # the `aws` fixture (conftest.py) creates it
AGENT = AgentRef(task="test_conformance", agent=str(AGENTS / "scripted_agent.py"))
SESSION_ID = "arl-" + secrets.token_hex(20)

SCENARIOS = {
    "ok": ({"mode": "ok", "x": 21}, Status.COMPLETED, {"answer": 42, "session_id": SESSION_ID}),
    "stream": ({"mode": "stream", "x": 4}, Status.COMPLETED, {"answer": 8}),
    "raise": ({"mode": "raise", "x": 1}, Status.AGENT_ERROR, None),
    "timeout": ({"mode": "sleep", "sleep_s": 2.0, "x": 1}, Status.TIMEOUT, None),
}
TIMEOUT_S = {"timeout": 0.8}


@pytest.fixture(scope="module")
def data_plane(aws):
    _, app = load_agent_app("scripted_agent.py")
    agent = serve(app)
    with serve_data_plane({ARN: agent.url}) as plane:
        yield plane.url
    agent.stop()


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=["local", "agentcore-inline", "agentcore-s3"]
)
async def runtime(request, aws, data_plane):
    if request.param == "local":
        rt = LocalRuntime(LocalRuntimeConfig(concurrency=2, startup_timeout_s=30), kill_grace_s=0.5)
    else:
        s3 = request.param.endswith("s3")
        rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=data_plane, result_mode="s3" if s3 else "inline", s3_bucket=BUCKET if s3 else None, s3_endpoint_url=aws, poll_initial_s=0.02, poll_max_s=0.1))
    yield rt
    await rt.aclose()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_same_outcome_on_every_runtime(runtime, scenario):
    payload, status, result = SCENARIOS[scenario]
    outcome = await runtime.run_session(
        agent=AGENT,
        session_id=SESSION_ID,
        payload={**payload, "_rollout": {"api_key": SESSION_ID, "input_id": scenario}},
        timeout_s=TIMEOUT_S.get(scenario, 20.0),
    )
    assert outcome.status is status, outcome.error
    assert outcome.result == result
    if status is not Status.COMPLETED:
        assert outcome.error
    if scenario == "raise":
        assert "500" in outcome.error or "ValueError" in outcome.error
