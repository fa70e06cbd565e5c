"""Which agent a case runs: the task's own, a sanity agent (`agent=oracle|null`), or an override.

An oracle that acts (its result has `_script`, a list of assistant turns) runs the task's OWN
agent, teacher-forced: the gateway session answers each model call with the next scripted turn
(`gateway/forcing.py`), the real tools run in the real sandbox, and the traces are exact
demonstrations. An oracle without `_script` is submitted as the result by the oracle agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import TASK_AGENT
from ..errors import ConfigError
from ..gateway.forcing import SCRIPT_KEY, normalize_script
from ..sanity_agents import AGENTS, ORACLE_KEY
from ..tasks import TaskSpec, missing_oracle_message, oracle_result


def check_task(spec: TaskSpec, choice: str) -> None:
    """Refuse, before anything runs, a task the chosen agent cannot run (oracle without `oracle`)."""
    if choice == "oracle" and spec.oracle is None:
        raise ConfigError(missing_oracle_message(spec.name))


def agent_for(spec: TaskSpec, choice: str) -> str | None:
    """The agent the runtime starts: a file path, a module:app, or None (the task names none)."""
    if choice == TASK_AGENT:
        return spec.agent_path()
    return AGENTS.get(choice, choice)


@dataclass(frozen=True)
class AgentPlan:
    """What one case's session runs: the agent, a script to force (or None), and the oracle
    result the oracle agent submits (or None)."""

    agent: str | None
    script: tuple[dict[str, Any], ...] | None = None
    oracle: dict[str, Any] | None = None


def plan_agent(spec: TaskSpec, row: dict[str, Any], choice: str) -> AgentPlan:
    """The case's agent; under agent=oracle the task's reference solution decides (raises the
    task's errors: a bad oracle or `_script` fails the task)."""
    if choice != "oracle":
        return AgentPlan(agent=agent_for(spec, choice))
    result = oracle_result(spec, row)
    if SCRIPT_KEY in result:
        where = f"task {spec.name} row {row.get('id')!r}: oracle {SCRIPT_KEY}"
        return AgentPlan(agent=spec.agent_path(), script=normalize_script(result[SCRIPT_KEY], where=where))
    return AgentPlan(agent=agent_for(spec, choice), oracle=result)


def add_oracle_result(plan: AgentPlan, payload: dict[str, Any]) -> None:
    """Put the reference result where the oracle agent reads it (a submitting oracle only)."""
    if plan.oracle is not None:
        payload["_rollout"][ORACLE_KEY] = plan.oracle
