"""The rLLM path: an rLLM-prepared AgentCore agent (agentcore-rl-toolkit's `AgentCoreRLApp`,
reading rLLM's top-level row fields and `_rollout`, returning `rewards` to S3) is evaluated here
unchanged. Pins the payload it receives and where its reward comes from, through the harness's
own payload building, the agentcore runtime (real boto3 -> loopback data plane, moto's S3) and
the local runtime (its loopback stand-in for S3)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("agentcore_rl_toolkit", reason="pip install --no-deps agentcore-rl-toolkit==0.2.0")

from acr_stub import AGENTS, aws_environment, fake_model_app, load_agent_app, serve, serve_data_plane  # noqa: E402

import agentcore_rl_harness as arl  # noqa: E402
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.records import SamplingParams, SessionOutcome, Status, Usage  # noqa: E402
from agentcore_rl_harness.run.cases import Case, Episode  # noqa: E402
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime  # noqa: E402
from agentcore_rl_harness.runtimes.base import AgentRef  # noqa: E402
from agentcore_rl_harness.runtimes.local import LocalRuntime  # noqa: E402
from agentcore_rl_harness.run.scoring import RolloutHandle, score_offline  # noqa: E402
from agentcore_rl_harness.tasks import build_payload, rollout_block, task_spec  # noqa: E402

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/rllm-math-Ab12Cd34Ef"
BUCKET = "arl-rllm"
SESSION_ID = "arl-" + "0" * 40
RLLM_ROW = {"idx": 0, "prompt": "What is 6 * 7?", "answer": "42", "data_source": "gsm8k"}


def _spec():
    def test_gsm8k(rollout, row):
        assert rollout.reward == 1.0

    strip = lambda row: {k: v for k, v in row.items() if k not in ("id", "split")}  # noqa: E731
    return task_spec(arl.task(dataset="gsm8k.jsonl", agent=str(AGENTS / "art_rl_app_agent.py"),
                              reward_from_agent=True, payload=strip)(test_gsm8k))


def _payload(spec, row, model_url):
    block = rollout_block(base_url=model_url + "/v1", model_id="policy", session_id=SESSION_ID,
                          sampling=SamplingParams(max_tokens=16))
    return build_payload(spec, row, block)


def _score(spec, row, outcome):
    case = Case(spec=spec, row=row, sample_index=0, phase="eval")
    handle = RolloutHandle(Episode(case=case, session_id=SESSION_ID, outcome=outcome, traces=(),
                                   turns=1, usage=Usage()))
    return score_offline(case, handle, lambda f, *a, **k: f(*a, **k), {}), handle


@pytest.fixture(scope="module")
def model():
    seen: list[dict] = []
    server = serve(fake_model_app(seen))
    yield server.url, seen
    server.stop()


def test_the_payload_is_the_rllm_row_plus_rollout_and_no_s3_triple_by_default(model):
    spec = _spec()
    payload = _payload(spec, {**RLLM_ROW, "id": "0", "split": "test"}, model[0])
    assert {k: v for k, v in payload.items() if k != "_rollout"} == RLLM_ROW  # as rLLM sends it
    assert payload["_rollout"] == {
        "base_url": model[0] + "/v1", "model_id": "policy", "api_key": SESSION_ID,
        "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 16},
    }


@pytest.mark.asyncio
async def test_rllm_agent_on_agentcore_with_s3_results(model):
    spec = _spec()
    row = {**RLLM_ROW, "id": "0", "split": "test"}
    with aws_environment(BUCKET) as s3_url:
        agent = serve(load_agent_app("art_rl_app_agent.py")[1])
        try:
            with serve_data_plane({ARN: agent.url}) as plane:
                rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={spec.name: ARN}, endpoint_url=plane.url, result_mode="s3", s3_bucket=BUCKET, s3_endpoint_url=s3_url, exp_id="rllm-exp", poll_initial_s=0.05))
                outcome = await rt.run_session(
                    agent=AgentRef(task=spec.name, agent=None, input_id="0"), session_id=SESSION_ID,
                    payload=_payload(spec, row, model[0]), timeout_s=30,
                )
                await rt.aclose()
                sent = json.loads(plane.invocations[0]["body"])
        finally:
            agent.stop()
    # what rLLM's agent reads: its row's fields at the top level, `_rollout` with the S3 triple
    assert {k: v for k, v in sent.items() if k != "_rollout"} == RLLM_ROW
    assert sent["_rollout"]["exp_id"] == "rllm-exp" and sent["_rollout"]["input_id"] == "0"
    assert sent["_rollout"]["s3_bucket"] == BUCKET
    assert {"base_url", "model_id", "api_key"} <= set(sent["_rollout"])
    assert outcome.status is Status.COMPLETED, outcome.error
    verdict, handle = _score(spec, row, outcome)
    assert verdict.status is Status.COMPLETED and handle.reward == 1.0  # the agent's `rewards`
    assert handle.rewards == {"agent": 1.0}


@pytest.mark.asyncio
async def test_rllm_agent_on_the_local_runtime_with_s3_results(model):
    spec = _spec()
    row = {**RLLM_ROW, "id": "0", "split": "test"}
    rt = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, result_mode="s3"), kill_grace_s=0.5)
    try:
        outcome = await rt.run_session(
            agent=AgentRef(task=spec.name, agent=spec.agent_path(), input_id="0"),
            session_id=SESSION_ID, payload=_payload(spec, row, model[0]), timeout_s=60,
        )
    finally:
        await rt.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result["rewards"] == [1.0]
    verdict, handle = _score(spec, row, outcome)
    assert verdict.status is Status.COMPLETED and handle.reward == 1.0


def test_a_wrong_answer_is_the_agents_zero_reward_and_a_failed_task():
    spec = _spec()
    row = {**RLLM_ROW, "id": "0", "split": "test"}
    outcome = SessionOutcome(Status.COMPLETED, {"rewards": [0.0], "answer": "41"}, None, 1.0)
    verdict, handle = _score(spec, row, outcome)
    assert verdict.status is Status.TASK_FAILED and handle.reward == 0.0
