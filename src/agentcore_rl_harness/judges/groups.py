"""Waiting for a GRPO group's members, so a group-relative judge sees the whole group at once.

The harness tells the board of every case it submits (`expect`) and of every episode that comes
back (`done`, also for one that failed); `members` waits until every member submitted in this
process is back. Members a resumed run kept from before, or that another process of the run
(`pytest -n`) rolls out, are not waited for: the group is judged among the members here.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

POLL_S = 0.02


class GroupBoard:
    """Episodes by group id (any objects; None for a member whose episode never came back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: dict[str, int] = {}
        self._members: dict[str, dict[int, Any]] = {}

    def expect(self, group_id: str) -> None:
        with self._lock:
            self._expected[group_id] = self._expected.get(group_id, 0) + 1

    def done(self, group_id: str, sample_index: int, episode: Any) -> None:
        with self._lock:
            self._members.setdefault(group_id, {})[sample_index] = episode

    def _ready(self, group_id: str) -> dict[int, Any] | None:
        with self._lock:
            members = self._members.get(group_id, {})
            return dict(members) if len(members) >= self._expected.get(group_id, 0) else None

    async def members(self, group_id: str) -> dict[int, Any]:
        """Sample index -> episode of every member submitted here, once all are back."""
        while True:
            ready = self._ready(group_id)
            if ready is not None:
                return ready
            await asyncio.sleep(POLL_S)
