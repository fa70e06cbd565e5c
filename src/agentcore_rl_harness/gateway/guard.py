"""`FailedKeyLimiter`: a peer that keeps presenting keys the gateway never issued is refused (429).

Session keys are bearer credentials once the gateway is reachable from AWS. They are 160+ random
bits, so guessing cannot succeed, but a peer hammering the gateway with made-up keys is still
refused: after `limit` failed attempts (unknown session keys, wrong admin tokens) within
`window_s`, every request of that peer is a 429 with `Retry-After` until its oldest failure in
the window has aged out. Keys of finished or reaped sessions are not failures (a slow agent
legitimately retries with them). Peers are tracked by address, at most `max_peers` of them (the
stalest forgotten first), so memory stays bounded under a spray of source addresses.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

__all__ = ["FailedKeyLimiter"]


class FailedKeyLimiter:
    def __init__(self, *, limit: int, window_s: float = 60.0, max_peers: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.max_peers = limit, window_s, max_peers
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()

    def retry_after(self, peer: str) -> float | None:
        """Seconds until `peer` may try again, or None when it is not blocked."""
        with self._lock:
            failures = self._recent(peer)
            if failures is None or len(failures) < self.limit:
                return None
            return max(failures[0] + self.window_s - self._clock(), 0.001)

    def failed(self, peer: str) -> None:
        with self._lock:
            failures = self._recent(peer)
            if failures is None:
                failures = self._failures[peer] = collections.deque(maxlen=self.limit)
                while len(self._failures) > self.max_peers:
                    self._failures.popitem(last=False)
            self._failures.move_to_end(peer)
            failures.append(self._clock())

    def _recent(self, peer: str) -> collections.deque[float] | None:
        failures = self._failures.get(peer)
        if failures is None:
            return None
        horizon = self._clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[peer]
            return None
        return failures
