"""`runtime=agentcore` and per-task environments (`runtimes/_acr_environments.py`): ACR runs every
session in its runtime ARN's image, so a task's `environment=` is not applied there. The run says
so once per task at its start, naming the task, the environment, the ARN and how to deploy the
environment as that image; `runtime.environments` is refused for runtime=agentcore, saying why.
Real boto3 against the loopback data-plane stub, the run core driven as the plugin drives it."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from bedrock_agentcore import BedrockAgentCoreApp

import agentcore_rl_harness as arl
from run_driver import drive_items
from terminal_lines import Lines
from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.runtimes._acr_environments import DEPLOY_DOCS, environment_notes, limits_notes
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.fake import FakeRuntime
from agentcore_rl_harness.runtimes.isolation import SandboxLimits
from agentcore_rl_harness.tasks import task_spec

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/java-Ab12Cd34Ef"
OTHER_ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/other-Ab12Cd34Ef"
FAST = ["report.progress=lines", "runtime.concurrency=4", "eval.timeout_s=30"]
DOCS = Path(__file__).parents[2] / "docs" / "environments.md"


def test_one_note_per_task_that_names_an_environment(caplog):
    agents = [AgentRef(task="java", agent="/p/agent.py", environment="/p/envs/java.yaml"),
              AgentRef(task="java", agent="/p/agent.py", environment="/p/envs/java.yaml"),
              AgentRef(task="plain", agent="/p/agent.py"),
              AgentRef(task="unmapped", agent="pkg.agent:app", environment="/p/rootfs.tar")]
    arns = {"java": ARN}
    with caplog.at_level(logging.WARNING):
        notes = environment_notes(agents, arn_of=arns.get)
    assert len(notes) == 2 and [r.getMessage() for r in caplog.records] == notes
    java, unmapped = notes
    assert java.startswith("runtime=agentcore: task java names the environment /p/envs/java.yaml, which the "
                           "harness does not apply on AgentCore Runtime")
    assert f"the container image of its runtime ARN {ARN}" in java
    assert "`agentcore-rl env dockerfile /p/envs/java.yaml --agent /p/agent.py`" in java and DEPLOY_DOCS in java
    assert "task unmapped" in unmapped and "--agent AGENT.py" in unmapped  # no agent file to name
    assert "its runtime ARN's container image" in unmapped


def test_the_docs_section_the_note_points_to_exists():
    assert "\n## Deploying the same environment to ACR\n" in DOCS.read_text()
    assert "'Deploying the same environment to ACR'" in DEPLOY_DOCS


def test_the_agentcore_runtime_notes_its_tasks_environments_and_others_note_nothing(aws_credentials):
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"java": ARN, "*": OTHER_ARN},
                                                      endpoint_url="http://127.0.0.1:9"))
    try:
        notes = runtime.notes(agents=[AgentRef(task="java", agent=None, environment="/e/java.yaml"),
                                      AgentRef(task="other", agent=None, environment="/e/other")])
    finally:
        asyncio.run(runtime.aclose())
    assert [ARN in notes[0], OTHER_ARN in notes[1]] == [True, True]
    assert runtime.notes(agents=[AgentRef(task="java", agent=None)]) == []
    fake = FakeRuntime(lambda session: {"ok": True})
    assert fake.notes(agents=[AgentRef(task="java", agent=None, environment="/e/java.yaml")]) == []


def test_runtime_environments_is_refused_for_agentcore_saying_why():
    with pytest.raises(ConfigError) as caught:
        compose_config(["runtime=agentcore", f"+runtime.arns.java={ARN}", "+runtime.environments.java=/e/java.yaml"])
    message = str(caught.value)
    assert message.startswith("runtime.environments does not apply to runtime=agentcore")
    assert "container image" in message and "agentcore-rl env dockerfile" in message
    assert "Deploying the same environment to ACR" in message
    local = compose_config(["+runtime.environments.java=/e/java.yaml"]).typed.runtime
    assert local.environments == {"java": "/e/java.yaml"}  # runtime=local takes it


def _agent_app() -> BedrockAgentCoreApp:
    app = BedrockAgentCoreApp()

    @app.entrypoint
    def invoke(payload):
        return {"answer": "4"}

    return app


@pytest.fixture
def plane(acr_plane):
    return acr_plane(_agent_app(), ARN)


@pytest.mark.slow
def test_an_acr_run_says_once_at_start_that_the_tasks_environment_is_the_arns_image(
        tmp_path, plane, scripted_harness):
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"r{i}", "split": "test"}) + "\n" for i in range(2)))
    (tmp_path / "agent.py").write_text("")

    def test_java(rollout, row):
        assert rollout.result == {"answer": "4"}

    spec = task_spec(arl.task(dataset=str(dataset), agent=str(tmp_path / "agent.py"), samples=2, name="java",
                              environment=str(tmp_path / "envs" / "java.yaml"))(test_java))
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=plane.url, retry_backoff_s=0.01))
    harness = scripted_harness(FAST, runtime=runtime)
    terminal = Lines()
    run = Run.made(RunOptions(mode="eval", overrides=tuple(FAST), rootdir=tmp_path, out=tmp_path / "out"),
                   terminal=terminal, harness=harness)
    try:
        outcomes = drive_items(run, [(f"java::{i}", item) for i, item in enumerate(run.plan(spec))],
                               lambda item_id, item: {"rollout": run.rollout_for(item_id), "row": dict(item.row)})
    finally:
        failed = run.finish()
        asyncio.run(runtime.aclose())
    assert not failed and sorted(outcomes.values()) == ["passed"] * 4  # the sessions ran on the ARN
    assert len(plane.invocations) == 4
    notes = [line for line in terminal.lines if "names the environment" in line]
    environment = str(tmp_path / "envs" / "java.yaml")
    assert notes == [
        f"agentcore-rl: runtime=agentcore: task java names the environment {environment}, which the harness "
        f"does not apply on AgentCore Runtime: every session runs in the container image of its runtime ARN "
        f"{ARN}. Deploy the environment as that image (`agentcore-rl env dockerfile {environment} --agent "
        f"{tmp_path / 'agent.py'}`, build and push it, create the runtime from it and map the task to its "
        f"ARN; {DEPLOY_DOCS})"]
    said = terminal.lines.index(notes[0])
    assert said < next(i for i, line in enumerate(terminal.lines) if "rollouts" in line)  # at the start


def test_runtime_limits_acr_cannot_apply_are_noted_at_the_start_not_only_logged(aws_credentials):
    limits = SandboxLimits(session_memory_mb=512, session_pids=64)
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url="http://127.0.0.1:9",
                                                      limits=limits))
    try:
        notes = runtime.notes(agents=[AgentRef(task="java", agent=None, environment="/e/java.yaml")])
    finally:
        asyncio.run(runtime.aclose())
    assert len(notes) == 2 and "task java names the environment" in notes[1]
    assert notes[0] == ("runtime=agentcore: AgentCore Runtime runs each session in its own microVM under its own "
                        "limits; the harness cannot apply runtime.limits session_memory_mb=512, session_pids=64 "
                        "(they apply to runtime=local only; docs/session-limits.md)")
    assert limits_notes(SandboxLimits()) == []
