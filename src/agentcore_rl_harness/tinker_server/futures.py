"""Tinker futures: submitted work runs on one worker thread, in arrival order; results wait here.

A training client sends request N+1 only after request N was accepted, so arrival order is the
client's seq_id order. `retrieve` long-polls up to `poll_wait_s`, then answers try_again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import NotFound, TinkerServerError

log = logging.getLogger("agentcore_rl_harness.tinker_server")

_STOP = object()


@dataclass
class FutureRecord:
    request_id: str
    event: asyncio.Event
    loop: asyncio.AbstractEventLoop
    result: dict[str, Any] | bytes | None = None
    """A JSON body, protobuf bytes, or a failed request's `{"error", "category"}`."""
    done_at: float | None = None
    retrieved_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class FutureTable:
    """The futures of one server; `submit` must be called on the server's event loop."""

    def __init__(self, *, retain_s: float = 600.0) -> None:
        self.retain_s = retain_s
        self.try_again_count = 0
        self._records: dict[str, FutureRecord] = {}
        self._ids = itertools.count(1)
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="tinker-server-worker", daemon=True)
        self._worker.start()

    def submit(self, work: Callable[[], dict[str, Any] | bytes], **extra: Any) -> str:
        self._purge()
        record = FutureRecord(f"req-{next(self._ids)}", asyncio.Event(), asyncio.get_running_loop(), extra=extra)
        self._records[record.request_id] = record
        self._queue.put((record, work))
        return record.request_id

    async def retrieve(self, request_id: str, wait_s: float) -> FutureRecord | None:
        """The finished record, or None if it is still running after `wait_s`."""
        record = self._records.get(request_id)
        if record is None:
            raise NotFound(f"unknown future {request_id!r} (never submitted, or retrieved over "
                           f"{self.retain_s:.0f} s ago)")
        if not record.event.is_set():
            try:
                await asyncio.wait_for(record.event.wait(), wait_s)
            except asyncio.TimeoutError:
                self.try_again_count += 1
                return None
        record.retrieved_at = record.retrieved_at or time.monotonic()
        return record

    def close(self) -> None:
        self._queue.put(_STOP)
        self._worker.join(timeout=30)

    def _purge(self) -> None:
        now = time.monotonic()
        for request_id in [r for r, record in self._records.items()
                           if (record.retrieved_at is not None and record.retrieved_at < now - self.retain_s)
                           or (record.done_at is not None and record.done_at < now - 6 * self.retain_s)]:
            del self._records[request_id]

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            record, work = item
            try:
                record.result = work()
            except TinkerServerError as exc:
                record.result = {"error": str(exc), "category": "user"}
            except Exception as exc:  # noqa: BLE001 - a failed job is reported to its client
                log.exception("request %s failed", record.request_id)
                record.result = {"error": f"{type(exc).__name__}: {exc}", "category": "server"}
            record.done_at = time.monotonic()
            try:
                record.loop.call_soon_threadsafe(record.event.set)
            except RuntimeError:  # the server's loop is gone (shutting down)
                return
