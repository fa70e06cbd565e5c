"""A completed AgentCore session kept live for its task to inspect (`AgentCoreRuntime.kept`)."""

from __future__ import annotations

from typing import Any

from ..errors import SandboxError
from ..records import SessionOutcome, Status
from ._acr_commands import AcrSessionSandbox


class KeptAcrSession:
    """A completed ACR session kept live for its task (`AgentCoreRuntime.kept`): `open()` is its
    sandbox, `aclose()` stops the session, whether it was opened or not."""

    live = True

    def __init__(self, runtime: Any, outcome: SessionOutcome, *, session_id: str) -> None:
        self.session_id = session_id
        self._runtime = runtime
        self._outcome = outcome

    async def open(self) -> AcrSessionSandbox:
        if self._outcome.status is not Status.COMPLETED:
            raise SandboxError(f"session {self.session_id} ended as {self._outcome.status.value} "
                               "and was stopped: there is no session left to inspect")
        return self._runtime.sandbox(self.session_id)

    async def aclose(self) -> None:
        await self._runtime.release(self.session_id)
