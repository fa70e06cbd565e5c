"""The `AgentRuntime` seam: run one agent session and report how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..records import SessionOutcome


@dataclass(frozen=True)
class AgentRef:
    """Which agent serves a task: `agent` is a file path or `module:app` (local runtime)."""

    task: str
    agent: str | None


@runtime_checkable
class AgentRuntime(Protocol):
    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float
    ) -> SessionOutcome:
        """Invoke the agent once with `payload`; never raise for agent failures (they are data)."""
        ...

    async def aclose(self) -> None: ...
