"""A trainer's blocking update off the event loop, on a thread the interpreter does not wait for.

`asyncio.to_thread` runs work on the loop's default executor, whose threads the interpreter
joins at exit: a run stopped (Ctrl-C, SIGTERM) during a long update then writes its report and
hangs until the update ends, or forever when the update waits on a sampler that was closed. An
update on a daemon thread is left behind instead; the trainer's `close` asks it to stop at its
next micro-batch (`UpdateStopped`), and its result, if it ever comes, is dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class UpdateStopped(Exception):
    """The trainer was closed during an update; the update was abandoned before it changed the
    weights (the step is discarded)."""


async def in_daemon_thread(function: Callable[..., T], *args: Any, name: str = "agentcore-rl-update") -> T:
    """`await asyncio.to_thread(function, *args)`, on a daemon thread of its own."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled: the run stopped waiting
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        value, error = None, None
        try:
            value = function(*args)
        except BaseException as exc:  # handed to the awaiting coroutine, like to_thread
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: the run ended while the update ran
            pass

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future
