"""Processes of local sessions: a spawned session process, and how any session process ends.

`SpawnedChild` has the same face as the zygote pool's `ForkedChild`, so the runtime and the
restored sandboxes (`_final_state.py`) terminate either one the same way: SIGTERM to the process
group, SIGKILL after the grace period (which also reaps grandchildren left in the group).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from typing import Any

from ._zygote_pool import ForkedChild

logger = logging.getLogger(__name__)

REAP_WAIT_S = 5.0


class SpawnedChild:
    """A session process started by `spawn`, with the same face as `ForkedChild`."""

    def __init__(self, process: asyncio.subprocess.Process, info_fd: int | None = None) -> None:
        self.process = process
        self.pid: int | None = process.pid
        self._info_fd = info_fd
        self._sandbox_pid: int | None = None

    def sandbox_pid(self) -> int | None:
        """The host pid of the first process inside the session's namespaces (bubblewrap's
        `--info-fd` child-pid), or the process itself without namespaces."""
        if self._info_fd is None:
            return self.pid
        if self._sandbox_pid is None:
            with contextlib.suppress(OSError, ValueError):
                info = os.read(self._info_fd, 65536)
                self._sandbox_pid = int(json.loads(info.split(b"}")[0] + b"}")["child-pid"])
        return self._sandbox_pid

    async def wait_sandbox_pid(self, timeout_s: float) -> int:
        """`sandbox_pid()` once bubblewrap has written it (TimeoutError after `timeout_s`)."""
        async with asyncio.timeout(timeout_s):
            while (pid := self.sandbox_pid()) is None:
                if self.exited:
                    raise ProcessLookupError(f"session process {self.pid} exited before its "
                                             f"sandbox started ({self.exit_state()})")
                await asyncio.sleep(0.01)
        return pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def exited(self) -> bool:
        return self.process.returncode is not None

    async def read_ready(self) -> bytes:
        assert self.process.stdout is not None
        return await self.process.stdout.readline()

    async def wait(self) -> int | None:
        return await self.process.wait()

    def exit_state(self) -> str:
        code = self.process.returncode
        return f"exit code {code}" if code is not None else "process still running"

    def send_signal(self, sig: signal.Signals) -> None:
        killpg(self.process.pid, sig)

    def close(self) -> None:
        """Release bubblewrap's info pipe (`wait()` reaped the process)."""
        if self._info_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._info_fd)
            self._info_fd = None


Child = SpawnedChild | ForkedChild


async def terminate(child: Child, *, kill_grace_s: float) -> None:
    """SIGTERM the session's process group, SIGKILL it after the grace period; `close()` it."""
    try:
        child.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(kill_grace_s):
                await child.wait()
        except TimeoutError:
            logger.warning("agent pid %s ignored SIGTERM; killing it", child.pid)
        child.send_signal(signal.SIGKILL)  # also reaps grandchildren left in the group
        try:
            async with asyncio.timeout(REAP_WAIT_S):
                await child.wait()
        except TimeoutError:
            logger.warning("agent pid %s did not exit after SIGKILL", child.pid)
    finally:
        child.close()


def killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def log_rmtree_error(function: Any, path: str, exc_info: Any) -> None:
    logger.warning("could not remove session file %s: %s", path, exc_info[1])
