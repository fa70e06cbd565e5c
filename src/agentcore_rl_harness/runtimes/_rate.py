"""Priority-ordered pacing and slots: a token bucket and a capped slot pool, both asyncio.

Waiters are served highest priority first, FIFO within a priority. A cancelled waiter takes
nothing. Both are pure (no Ray, no boto3): the local limiter uses them in the harness process,
and the Ray limiter's actor holds the same objects for every process of a job.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable


class _PriorityQueue:
    """Futures ordered by (-priority, arrival); cancelled ones are skipped when popped."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    def push(self, priority: int) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (-priority, next(self._arrivals), waiter))
        return waiter

    def pop_live(self) -> asyncio.Future[None] | None:
        while self._heap:
            waiter = heapq.heappop(self._heap)[2]
            if not waiter.done():
                return waiter
        return None

    def __len__(self) -> int:
        return sum(1 for entry in self._heap if not entry[2].done())

    def __bool__(self) -> bool:
        return any(not entry[2].done() for entry in self._heap)


class TokenBucket:
    """At most `rate_per_s` acquisitions per second, `burst` at once; one per AgentCore runtime ARN.

    Grants keep to a schedule (one every `1 / rate_per_s`, GCRA-style) rather than to the moment
    the loop woke up: a late wake-up (a busy event loop) of up to half an interval is caught up,
    not lost, so a saturated bucket runs at its rate, not a few percent below it. The price is
    half a token: a window of `w` seconds holds at most `rate_per_s * w + burst + 0.5` grants.
    """

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
        self._interval = 1.0 / rate_per_s
        self._slack = (burst - 0.5) * self._interval  # idle credit: burst grants, less half a step
        self._next = clock() - self._slack
        self._waiting = _PriorityQueue()
        self._dispatcher: asyncio.Task[None] | None = None

    async def acquire(self, priority: int = 0) -> None:
        """Wait for one token; a higher `priority` is served before every lower one waiting."""
        waiter = self._waiting.push(priority)
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch())
        await waiter

    async def _dispatch(self) -> None:
        while self._waiting:
            now = self._clock()
            if now < self._next:
                await asyncio.sleep(self._next - now)
                continue
            waiter = self._waiting.pop_live()
            if waiter is not None:
                self._next = max(self._next, now - self._slack) + self._interval
                waiter.set_result(None)


class SlotPool:
    """At most `capacity` slots held at once; `acquire` waits by priority, `release` frees one."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.held = 0
        self.peak = 0
        self._waiting = _PriorityQueue()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def acquire(self, priority: int = 0) -> None:
        if self.held < self.capacity and not self._waiting:
            self._take()
            return
        waiter = self._waiting.push(priority)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, then cancelled: hand it on
                self.release()
            raise

    def release(self) -> None:
        if self.held <= 0:
            raise RuntimeError("SlotPool.release() without a held slot")
        self.held -= 1
        waiter = self._waiting.pop_live()
        if waiter is not None:
            self._take()
            waiter.set_result(None)

    def _take(self) -> None:
        self.held += 1
        self.peak = max(self.peak, self.held)
