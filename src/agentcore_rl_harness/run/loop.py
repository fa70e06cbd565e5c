"""The harness's event loop on a thread of its own: the one bridge between sync and async code.

Everything async (gateway sessions, agent sessions, sampling, `async def` tasks and rewards) runs
on one background loop; pytest's thread, and an external engine's, only submit work and wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

WAKE_S = 0.2  # how often the main thread, waiting on the loop, looks for a signal handed to another thread


class LoopThread:
    """An asyncio loop on a daemon thread; `submit` schedules a coroutine from any thread."""

    def __init__(self, name: str = "agentcore-rl-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = self.submit(coro)
        if threading.current_thread() is not threading.main_thread():
            return future.result(timeout)
        # The main thread waits in slices: a signal the kernel hands to another thread (this
        # loop's, an update's) only sets a flag, and Python runs the handler (Ctrl-C's clean stop)
        # when the main thread next wakes; a wait without a timeout would sleep until the work ends.
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = WAKE_S if deadline is None else min(WAKE_S, max(0.0, deadline - time.monotonic()))
            try:
                return future.result(wait)
            except concurrent.futures.TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def block_on(self, coro: Coroutine[Any, Any, T], *, refusal: str) -> T:
        """`run` for sync APIs over async ones: called on this loop itself (from async code) it
        would deadlock, so it raises HarnessError(`refusal`: what to await instead)."""
        from ..errors import HarnessError

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise HarnessError(refusal)
        return self.run(coro)

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a sync or async function to completion from a thread other than the loop's: a
        coroutine it returns is awaited on this loop (task bodies and rewards may be async)."""
        value = function(*args, **kwargs)
        if inspect.isawaitable(value):

            async def _await() -> Any:
                return await value

            return self.run(_await())
        return value

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(_cancel_all(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()
