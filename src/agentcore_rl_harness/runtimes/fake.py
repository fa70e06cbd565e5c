"""`FakeRuntime`: the in-package fake for the `AgentRuntime` seam (like httpx's MockTransport).

Each session is answered by a handler, sync or async, called with the `FakeSession` (the agent,
the session id, the payload with its `_rollout` block). What it returns decides the outcome: a
dict is the agent's result (`completed`), a `SessionOutcome` is taken as is; raising a
`HarnessError` is an infrastructure failure (it propagates, as a real runtime's does), any other
exception is the agent's (`agent_error`), and a handler still running at `timeout_s` is a
`timeout`. An async handler can call the gateway at `session.base_url` like a real agent would.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Union

from ..errors import HarnessError
from ..records import SessionOutcome, Status
from .base import AgentRef, AgentRuntime

Answer = Union[dict[str, Any], SessionOutcome]
Handler = Callable[["FakeSession"], Union[Answer, Awaitable[Answer]]]


@dataclass(frozen=True)
class FakeSession:
    """One `run_session` call as the handler sees it."""

    agent: AgentRef
    session_id: str
    payload: dict[str, Any]
    timeout_s: float

    @property
    def base_url(self) -> str:
        """The gateway's OpenAI-compatible base URL (ending in /v1) this session samples from."""
        return self.payload["_rollout"]["base_url"]

    @property
    def api_key(self) -> str:
        """The gateway session key (the runtime session id)."""
        return self.payload["_rollout"]["api_key"]


class FakeRuntime(AgentRuntime):
    """An `AgentRuntime` answering from `handler`; `sessions` records every call in order."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.sessions: list[FakeSession] = []
        self._live = 0
        self.closed = False

    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float,
        keep_state: bool = False,
    ) -> SessionOutcome:
        if self.closed:
            raise HarnessError("FakeRuntime is closed: no session can start")
        session = FakeSession(agent=agent, session_id=session_id, payload=payload, timeout_s=timeout_s)
        self.sessions.append(session)
        started = time.monotonic()
        self._live += 1
        try:
            answer = await asyncio.wait_for(self._answer(session), timeout_s)
        except HarnessError:
            raise
        except asyncio.TimeoutError:
            return SessionOutcome(status=Status.TIMEOUT, result=None, elapsed_s=time.monotonic() - started,
                                  error=f"the agent did not answer within {timeout_s}s")
        except Exception as exc:  # the agent's failure is data, as a real agent's 500 is
            return SessionOutcome(status=Status.AGENT_ERROR, result=None, elapsed_s=time.monotonic() - started,
                                  error=f"{type(exc).__name__}: {exc}")
        finally:
            self._live -= 1
        if isinstance(answer, SessionOutcome):
            return answer
        if not isinstance(answer, dict):
            return SessionOutcome(status=Status.AGENT_ERROR, result=None, elapsed_s=time.monotonic() - started,
                                  error=f"the agent returned {type(answer).__name__}, not a JSON object")
        return SessionOutcome(status=Status.COMPLETED, result=answer, error=None,
                              elapsed_s=time.monotonic() - started)

    async def _answer(self, session: FakeSession) -> Any:
        value = self._handler(session)
        if inspect.isawaitable(value):
            value = await value
        return value

    @property
    def live_sessions(self) -> int:
        return self._live

    async def aclose(self) -> None:
        self.closed = True
