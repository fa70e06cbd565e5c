"""An async token bucket: at most `rate_per_s` acquisitions per second, `burst` at once."""

from __future__ import annotations

import asyncio
import time
from typing import Callable


class TokenBucket:
    """Callers wait in FIFO order; one bucket per AgentCore runtime ARN (shared by all calls)."""

    def __init__(
        self, rate_per_s: float, *, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate_per_s)
        self._updated = now

    async def acquire(self) -> None:
        async with self._lock:
            self._refill()
            while self._tokens < 1.0:
                await asyncio.sleep((1.0 - self._tokens) / self.rate_per_s)
                self._refill()
            self._tokens -= 1.0
