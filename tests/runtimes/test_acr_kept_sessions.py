"""The `sandbox` fixture and `rollout.sandbox` on `runtime=agentcore`: a completed session is kept
live until its task is scored, its commands go through InvokeAgentRuntimeCommand on that same
runtime session, and it is stopped after scoring, passed or failed. Real boto3 against the
loopback data-plane stub; the run core driven as the plugin drives it."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import httpx
import pytest
from bedrock_agentcore import BedrockAgentCoreApp

import agentcore_rl_harness as arl
from acr_stub import serve
from run_driver import drive_items
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.errors import SandboxError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.tasks import task_spec

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/kept-Ab12Cd34Ef"
FAST = ["report.progress=off", "runtime.concurrency=4", "eval.timeout_s=30"]
STUB: dict = {}  # the running stub, for the agent and the task code below


def _agent_app() -> BedrockAgentCoreApp:
    """An agent that asks the gateway once and leaves the reply in its session's files (the
    stub's per-session directory stands in for the microVM's file system)."""
    app = BedrockAgentCoreApp()

    @app.entrypoint
    async def invoke(payload, context):
        rollout = payload["_rollout"]
        async with httpx.AsyncClient(base_url=rollout["base_url"], timeout=20) as client:
            response = await client.post(
                "/chat/completions", headers={"Authorization": f"Bearer {rollout['api_key']}"},
                json={"model": "m", "messages": [{"role": "user", "content": payload["question"]}]})
        reply = response.json()["choices"][0]["message"]["content"]
        plane = STUB["plane"]
        home = plane.session_dirs.setdefault(context.session_id, Path(tempfile.mkdtemp(prefix="acr-session-")))
        (home / "answer.txt").write_text(reply)
        return {"reply": reply}

    return app


@pytest.fixture
def plane(acr_plane):
    STUB["plane"] = acr_plane(_agent_app(), ARN)
    try:
        yield STUB["plane"]
    finally:
        STUB.clear()


@arl.reward
def file_says_four(rollout, row):
    """A reward that reads the session's files through `rollout.sandbox`."""
    return float(rollout.sandbox.sync.get_file("answer.txt") == b"4")


def _spec(tmp_path: Path, body, *, samples: int = 2):
    rows = [{"id": f"r{i}", "split": "test", "question": f"Say {i}"} for i in range(2)]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return task_spec(arl.task(dataset=str(dataset), samples=samples, rewards=[file_says_four],
                              name="kept")(body))


def _harness(scripted_harness, plane):
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=plane.url, retry_backoff_s=0.01))
    return scripted_harness(FAST, runtime=runtime)


def _drive(run, spec, argument_names):
    """What the plugin does per item: its body with pytest's fixture values, then its verdict."""
    def arguments(item_id, item):
        handle = run.rollout_for(item_id)
        available = {"rollout": handle, "row": dict(item.row), "sandbox": handle.sandbox}
        return {name: available[name] for name in argument_names}

    return drive_items(run, [(f"kept::{index}", item) for index, item in enumerate(run.plan(spec))],
                       arguments)


def test_a_task_and_its_reward_inspect_the_live_acr_session_which_is_stopped_after_scoring(
        tmp_path, plane, scripted_harness):
    seen = []

    def test_kept(rollout, row, sandbox):
        assert rollout.session_id not in plane.stopped_sessions  # still live while scored
        seen.append(rollout.session_id)
        assert sandbox is rollout.sandbox
        result = sandbox.sync.exec(["cat", "answer.txt"])
        assert result.ok and result.stdout == rollout.result["reply"]
        handle = sandbox.sync.exec(["sleep", "60"], background=True)
        assert handle.status() == "running"  # killed with the session after scoring
        assert rollout.reward == 1.0

    harness = _harness(scripted_harness, plane)
    run = Run.made(RunOptions(mode="eval", overrides=tuple(FAST), rootdir=tmp_path, out=tmp_path / "out"),
                   terminal=None, harness=harness)
    try:
        outcomes = _drive(run, _spec(tmp_path, test_kept), ["rollout", "row", "sandbox"])
    finally:
        failed = run.finish()
        asyncio.run(harness.runtime.aclose())  # a given runtime is the caller's to close
    assert not failed
    assert sorted(outcomes.values()) == ["AssertionError", "AssertionError", "passed", "passed"]
    records = [json.loads(line) for line in (run.run_dir / "rollouts.jsonl").read_text().splitlines()]
    by_session = {r["session_id"]: r for r in records}
    assert len(by_session) == 4 and sorted(seen) == sorted(by_session)
    for record in records:  # the reward read the file the agent left in its session
        assert record["rewards"]["file_says_four"] == float(record["result"]["reply"] == "4")
    # every session was stopped exactly once, after its commands (the stub refuses commands to a
    # stopped session, and every command above succeeded), the failed items' sessions too
    assert sorted(stop["session_id"] for stop in plane.stops) == sorted(by_session)
    commanded = {call["session_id"] for call in plane.commands}
    assert commanded == set(by_session)
    assert any("kill" in call["command"] for call in plane.commands)  # background handles killed


def test_the_harness_scoring_itself_gives_the_body_its_sandbox(tmp_path, plane, scripted_harness):
    """Pre-eval and training rollouts are scored without pytest: `sandbox` is offered there too."""
    def test_kept(rollout, row, sandbox):
        assert sandbox.sync.get_file("answer.txt").decode() == rollout.result["reply"]

    harness = _harness(scripted_harness, plane)
    run = Run.made(RunOptions(mode="eval", overrides=tuple(FAST), rootdir=tmp_path, out=tmp_path / "out"),
                   terminal=None, harness=harness)
    try:
        cases = run.plan(_spec(tmp_path, test_kept, samples=1))
        rollouts = run.offline_phase(cases)
    finally:
        run.finish()
        asyncio.run(harness.runtime.aclose())
    assert [r.status for r in rollouts] == [Status.COMPLETED] * 2
    assert [r.rewards["file_says_four"] for r in rollouts] == [1.0, 0.0]
    assert {stop["session_id"] for stop in plane.stops} == {r.session_id for r in rollouts}


@pytest.mark.asyncio
async def test_keep_state_keeps_only_completed_sessions_and_close_stops_what_is_kept(plane):
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=plane.url, retry_backoff_s=0.01))
    agent = AgentRef(task="t", agent=None)
    ok_agent = serve(_ok_app())
    kept_id, failed_id, forgotten_id = ("arl-" + c * 40 for c in "kfz")
    try:
        # no gateway here: the agent's model call fails, so it answers HTTP 500 (agent_error)
        failed = await runtime.run_session(agent=agent, session_id=failed_id, keep_state=True,
                                           payload={"question": "q", "_rollout": {}}, timeout_s=20)
        assert failed.status is Status.AGENT_ERROR and failed_id in plane.stopped_sessions
        with pytest.raises(SandboxError, match="ended as agent_error and was stopped"):
            await runtime.kept(failed, session_id=failed_id).open()

        plane.agents[ARN] = ok_agent.url
        outcome = await runtime.run_session(agent=agent, session_id=kept_id, keep_state=True,
                                            payload={}, timeout_s=20)
        assert outcome.status is Status.COMPLETED
        assert kept_id not in plane.stopped_sessions and runtime.live_sessions == 1
        kept = runtime.kept(outcome, session_id=kept_id)
        sandbox = await kept.open()
        assert (await sandbox.exec(["echo", "still here"])).stdout == "still here\n"
        await kept.aclose()
        assert kept_id in plane.stopped_sessions and runtime.live_sessions == 0
        with pytest.raises(SandboxError, match="has ended"):
            await sandbox.exec(["true"])

        await runtime.run_session(agent=agent, session_id=forgotten_id, keep_state=True,
                                  payload={}, timeout_s=20)
        assert forgotten_id not in plane.stopped_sessions
    finally:
        await runtime.aclose()
        ok_agent.stop()
    assert forgotten_id in plane.stopped_sessions  # never released: stopped when the runtime closes
    assert [stop["session_id"] for stop in plane.stops].count(kept_id) == 1


def _ok_app() -> BedrockAgentCoreApp:
    app = BedrockAgentCoreApp()

    @app.entrypoint
    def invoke(payload):
        return {"ok": True}

    return app
