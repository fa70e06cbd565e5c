"""Which agent a case runs: the task's own, a sanity agent (`agent=oracle|null`), or an override."""

from __future__ import annotations

from typing import Any

from ..config import TASK_AGENT
from ..errors import ConfigError
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


def add_oracle_result(spec: TaskSpec, row: dict[str, Any], payload: dict[str, Any], choice: str) -> None:
    """Under agent=oracle, put the row's reference result where the oracle agent reads it."""
    if choice == "oracle":
        payload["_rollout"][ORACLE_KEY] = oracle_result(spec, row)
