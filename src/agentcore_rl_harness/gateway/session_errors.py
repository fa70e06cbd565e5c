"""Why a gateway session refuses a request: its key is unknown, finished, expired or taken, or
it used all its turns (`sessions.py` raises them; `routing.py` answers each with its status)."""

from __future__ import annotations

from ..errors import HarnessError

__all__ = ["SessionClosedError", "SessionError", "SessionExistsError", "SessionExpiredError", "TurnLimitError",
           "UnknownSessionError"]


class SessionError(HarnessError):
    """A session key is unknown, finished, or already taken."""


class UnknownSessionError(SessionError):
    pass


class SessionClosedError(SessionError):
    pass


class SessionExistsError(SessionError):
    pass


class TurnLimitError(SessionError):
    """The session used all the turns its limits allow."""


class SessionExpiredError(SessionClosedError):
    """The session was idle longer than its idle TTL, or outlived its lifetime."""
