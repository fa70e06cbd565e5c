"""What `runtime=agentcore` cannot apply, said once at the run's start (`AgentCoreRuntime.notes`).

Per-task environments (docs/environments.md): AgentCore Runtime runs every session of a runtime
ARN in that runtime's container image, so the environment a task names
(`@arl.task(environment=...)`) cannot be applied by the harness there: one note per task, with how
to deploy the environment as the image. Session caps: `runtime.limits` set away from their
defaults (ACR's microVM has its own limits): one note naming them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ._session_caps import unapplied_limits
from .base import AgentRef

logger = logging.getLogger(__name__)

DEPLOY_DOCS = "docs/environments.md, section 'Deploying the same environment to ACR'"


def environment_notes(agents: Sequence[AgentRef], *, arn_of: Callable[[str], str | None]) -> list[str]:
    """One note (and a logged warning) per task of `agents` that names an environment;
    `arn_of(task)` is the runtime ARN serving it (None: none mapped)."""
    notes: list[str] = []
    seen: set[str] = set()
    for agent in agents:
        if agent.environment is None or agent.task in seen:
            continue
        seen.add(agent.task)
        arn = arn_of(agent.task)
        image = f"the container image of its runtime ARN {arn}" if arn else "its runtime ARN's container image"
        source = agent.agent if agent.agent and agent.agent.endswith(".py") else "AGENT.py"
        notes.append(
            f"runtime=agentcore: task {agent.task} names the environment {agent.environment}, which the "
            f"harness does not apply on AgentCore Runtime: every session runs in {image}. Deploy the "
            f"environment as that image (`agentcore-rl env dockerfile {agent.environment} --agent {source}`, "
            f"build and push it, create the runtime from it and map the task to its ARN; {DEPLOY_DOCS})"
        )
        logger.warning("%s", notes[-1])
    return notes


def limits_notes(limits: object) -> list[str]:
    """One note when `runtime.limits` (a `SandboxLimits`) sets keys ACR cannot apply, else none."""
    unapplied = unapplied_limits(limits)
    if not unapplied:
        return []
    return [f"runtime=agentcore: AgentCore Runtime runs each session in its own microVM under its own limits; "
            f"the harness cannot apply runtime.limits {', '.join(unapplied)} (they apply to runtime=local only; "
            f"docs/session-limits.md)"]
