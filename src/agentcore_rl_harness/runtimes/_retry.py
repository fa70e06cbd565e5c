"""The resend policy of AWS calls: a bounded number of attempts with capped, jittered backoff.

Only the caller knows which errors prove a call had no effect (InvokeAgentRuntime is not
idempotent), so `retry_call` asks a `classify` function: None means "not a failure this policy
knows" and the exception propagates unchanged; otherwise the failure's `retryable` decides.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, Iterator, Protocol, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound="Classified")


class Classified(Protocol):
    """What `classify` returns for a known failure; `CallFailure` is one."""

    @property
    def retryable(self) -> bool: ...


@dataclass(frozen=True)
class Backoff:
    """At most `attempts` tries; the waits start at `initial_s` and double up to `max_s`.

    Each wait is drawn from the upper half of its step, so sessions throttled together do not
    resend together.
    """

    attempts: int
    initial_s: float
    max_s: float

    def waits(self, uniform: Callable[[float, float], float] = random.uniform) -> Iterator[float]:
        """The waits before the second, third, ... attempt (endless; the caller stops)."""
        step = self.initial_s
        while True:
            yield step * uniform(0.5, 1.0)
            step = min(step * 2, self.max_s)


class GaveUp(Exception, Generic[F]):
    """`retry_call` stopped on `failure` after `attempts` attempts (not retryable, or the last)."""

    def __init__(self, failure: F, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempt(s): {failure}")
        self.failure = failure
        self.attempts = attempts


async def retry_call(
    call: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    classify: Callable[[Exception], F | None],
    on_retry: Callable[[F, int], None] | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Await `call()` until it returns, resending after failures `classify` calls retryable.

    `on_retry(failure, next_attempt)` runs before each wait. An exception `classify` does not
    know propagates unchanged; a known one that may not be resent, or fails the last attempt,
    raises `GaveUp`.
    """
    waits = backoff.waits()
    for attempt in range(1, backoff.attempts + 1):
        try:
            return await call()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if not failure.retryable or attempt == backoff.attempts:
                raise GaveUp(failure, attempt) from None
        if on_retry is not None:
            on_retry(failure, attempt + 1)
        await sleep(next(waits))
    raise ValueError(f"backoff.attempts={backoff.attempts} must be >= 1")
