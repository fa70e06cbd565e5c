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


SIGNAL_ON_ANOTHER_THREAD = """
import asyncio, signal, sys, threading, time
from agentcore_rl_harness.run.loop import LoopThread

class Stopped(Exception):
    pass

def handler(signum, frame):
    raise Stopped()

signal.signal(signal.SIGUSR1, handler)
loop = LoopThread()
# the kernel may hand a process's signal to any thread: send it to the loop's thread itself
threading.Timer(0.5, lambda: signal.pthread_kill(loop._thread.ident, signal.SIGUSR1)).start()
started = time.monotonic()
try:
    loop.run(asyncio.sleep(60))
except Stopped:
    print(f"stopped after {time.monotonic() - started:.1f} s")
    sys.exit(0)
print("the wait ended without the handler")
sys.exit(1)
"""


def test_a_signal_another_thread_receives_still_reaches_the_waiting_main_thread(tmp_path):
    """A Ctrl-C the kernel gives the loop's thread (or an update's) runs its handler within a
    moment, not when the awaited work ends (CI once waited out a 300 s update)."""
    import subprocess
    import sys

    script = tmp_path / "signal_elsewhere.py"
    script.write_text(SIGNAL_ON_ANOTHER_THREAD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    seconds = float(done.stdout.split()[2])
    assert seconds < 30, done.stdout  # the awaited sleep is 60 s


def test_run_with_a_timeout_still_times_out_on_the_main_thread():
    import concurrent.futures
    import time

    loop = LoopThread()
    try:
        started = time.monotonic()
        try:
            loop.run(asyncio.sleep(10), timeout=0.5)
        except concurrent.futures.TimeoutError:
            pass
        else:
            raise AssertionError("no timeout")
        assert time.monotonic() - started < 5
        assert loop.run(asyncio.sleep(0, result=7), timeout=5) == 7
    finally:
        loop.close()
