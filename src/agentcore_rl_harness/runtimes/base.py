"""The `AgentRuntime` seam: run one agent session and report how it ended."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..mcp_servers import McpServer
from ..records import SessionOutcome


@dataclass(frozen=True)
class AgentRef:
    """Which agent serves a task: `agent` is a file path or `module:app` (local runtime).

    `input_id` (the dataset row id) names the case in S3 result keys; runtimes send it to the
    agent only in the S3 result mode, with `exp_id` and `s3_bucket` (agentcore-rl-toolkit's
    `AgentCoreRLApp` demands all three once one of them is present). `phase` (pre, train, post,
    eval, collect) sets the session's priority where a limiter serves waiters by priority.
    `mcp_servers`: started per session and named to the agent in `_rollout.mcp_servers`.
    `environment`: the task's environment (a spec file or rootfs path, `environments/`), which
    the local runtime makes the session's `/`; None: the host's filesystem.
    """

    task: str
    agent: str | None
    input_id: str | None = None
    phase: str | None = None
    mcp_servers: tuple[McpServer, ...] = ()  # the task's MCP tool servers (`mcp_servers.py`)
    environment: str | None = None


class KeptSession(Protocol):
    """What a runtime kept of a finished session for its task (`runtime.kept(outcome, ...)`):
    the local runtime its files (restored on `open`), AgentCore the live session (stopped at
    `aclose`). `live`: the session itself is kept (its files are not copied out)."""

    live: bool

    async def open(self) -> Any: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class AgentRuntime(Protocol):
    """Runs agent sessions. Implementations subclass it: the optional capabilities below are
    default methods (nothing kept, no live count), so callers never probe for them."""

    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float,
        keep_state: bool = False,
    ) -> SessionOutcome:
        """Invoke the agent once with `payload`; never raise for agent failures (they are data).
        `keep_state`: keep what `kept` returns for the session's task (a runtime that keeps
        nothing ignores it)."""
        ...

    async def aclose(self) -> None: ...

    def kept(self, outcome: SessionOutcome, *, session_id: str) -> KeptSession | None:
        """What this runtime kept of a session run with `keep_state=True` (None: nothing)."""
        return None

    def notes(self, *, agents: Sequence[AgentRef]) -> list[str]:
        """What the run says once at its start about the tasks `agents` serve: settings of theirs
        this runtime cannot apply (each note one line); [] where it applies them all."""
        return []

    @property
    def live_sessions(self) -> int:
        """Sessions alive now (the progress line's count); 0 where the runtime does not count."""
        return 0
