"""`run/loop.py`: the loop thread and the one bridge that runs sync or async task code."""

import asyncio
import threading

from agentcore_rl_harness.run.loop import LoopThread


def test_call_runs_sync_code_here_and_async_code_on_the_loop():
    loop = LoopThread()
    try:
        assert loop.call(lambda a, b=0: a + b, 1, b=2) == 3

        async def where():
            await asyncio.sleep(0)
            return threading.current_thread().name

        assert loop.call(where) == "agentcore-rl-loop"
    finally:
        loop.close()


def test_close_cancels_what_still_runs_and_is_idempotent():
    loop = LoopThread()
    started = threading.Event()

    async def forever():
        started.set()
        await asyncio.sleep(3600)

    future = loop.submit(forever())
    started.wait(5)
    loop.close()
    assert future.cancelled() and loop.loop.is_closed()
    loop.close()
