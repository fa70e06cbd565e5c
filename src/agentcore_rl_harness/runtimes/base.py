"""The `AgentRuntime` seam: run one agent session and report how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..records import SessionOutcome


@dataclass(frozen=True)
class AgentRef:
    """Which agent serves a task: `agent` is a file path or `module:app` (local runtime).

    `input_id` (the dataset row id) names the case in S3 result keys; runtimes send it to the
    agent only in the S3 result mode, with `exp_id` and `s3_bucket` (agentcore-rl-toolkit's
    `AgentCoreRLApp` demands all three once one of them is present). `phase` (pre, train, post,
    eval, collect) sets the session's priority where a limiter serves waiters by priority.
    """

    task: str
    agent: str | None
    input_id: str | None = None
    phase: str | None = None


@runtime_checkable
class AgentRuntime(Protocol):
    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float
    ) -> SessionOutcome:
        """Invoke the agent once with `payload`; never raise for agent failures (they are data)."""
        ...

    async def aclose(self) -> None: ...
