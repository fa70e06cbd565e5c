"""`RecentKeys`: the keys of finished sessions, remembered for a while and then forgotten.

A late request with a finished session's key is told the session is finished (not that the key
is unknown, which counts against the peer as a guess), and the id cannot be opened again. Kept
forever, the keys grew a long-lived gateway by ~130 bytes per session (a 10-minute soak of 47,586
sessions: +6 MiB), so each is kept `keep_s` seconds, at most `max_keys` of them.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

__all__ = ["RecentKeys"]


class RecentKeys:
    """Not thread-safe: the session store calls it under its own lock."""

    def __init__(self, *, keep_s: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.keep_s, self.max_keys = keep_s, max_keys
        self._clock = clock
        self._added: collections.OrderedDict[str, float] = collections.OrderedDict()

    def add(self, key: str) -> None:
        """Remember `key` from now; forget the oldest keys past the time or the count bound."""
        now = self._clock()
        self._added[key] = now
        self._added.move_to_end(key)
        horizon = now - self.keep_s
        while self._added:
            oldest, added_at = next(iter(self._added.items()))
            if added_at > horizon and len(self._added) <= self.max_keys:
                break
            del self._added[oldest]

    def discard(self, key: str) -> None:
        self._added.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._added

    def __len__(self) -> int:
        return len(self._added)
