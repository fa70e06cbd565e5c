"""What is in flight: `inflight.json` in the run directory, so `agentcore-rl view` on a running
run shows the rollouts that are not finished yet (the directory is the viewer's only channel).

`InFlight` is told by the scheduler when a case is submitted (`watch`); the case's future ends
its entry. A case is "queued" until the harness opens its agent session ("running", with the
session id and start time, from `session_of`). The file is rewritten whole (a temporary file,
then `os.replace`, so a reader never sees half of it), at most every `every_s` seconds: events
inside that window are written by the next event or `refresh` (the scheduler's progress tick),
never on a turn's path. `close` (the run's end, interrupted or not) deletes it. A worker process
of a sharded run (`pytest -n`) writes its own `inflight-<pid>.json`; the viewer reads them all.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..store import INFLIGHT
from .cases import Case
from .compose import Harness
from .rundir import RunDir

EVERY_S = 1.0  # the most often the file is rewritten
SessionOf = Callable[[Case], "tuple[str, float] | None"]  # case -> (session id, wall start) once running


def in_flight(rundir: RunDir, harness: Harness) -> "InFlight":
    """The run's writer: inflight.json for the process that owns the run directory, a worker's
    own inflight-<pid>.json under `pytest -n`."""
    name = INFLIGHT if not rundir.shared else f"{Path(INFLIGHT).stem}-{os.getpid()}.json"
    return InFlight(rundir.path, session_of=harness.session_of, name=name)


class InFlight:
    """The writer of one process's in-flight file (thread-safe: cases end on the loop thread)."""

    def __init__(self, run_dir: Path, *, session_of: SessionOf, name: str = INFLIGHT,
                 every_s: float = EVERY_S, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(run_dir) / name
        self._session_of = session_of
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one write at a time, each of the newest state
        self._cases: dict[int, tuple[Case, float]] = {}  # id(case) -> (case, submitted at)
        self._written_at = float("-inf")
        self._timer: threading.Timer | None = None  # a throttled change's write, pending
        self._closed = False

    def watch(self, case: Case, future: concurrent.futures.Future[Any]) -> None:
        """`case` was submitted: in flight until `future` is done."""
        with self._lock:
            self._cases[id(case)] = (case, self._clock())
        future.add_done_callback(lambda _: self._ended(case))
        self._changed()

    def refresh(self) -> None:
        """Rewrite the file if it is due (a case queued before now running shows here; the
        file's age tells the viewer the run still writes it)."""
        self._changed()

    def entries(self) -> list[dict[str, Any]]:
        """One dict per case in flight, oldest first (what the file's `cases` holds)."""
        with self._lock:
            cases = sorted(self._cases.values(), key=lambda pair: pair[1])
        out = []
        for case, submitted in cases:
            session = self._session_of(case)
            out.append({"task": case.spec.name, "row_id": case.row_id, "sample_index": case.sample_index,
                        "phase": case.phase, "step": case.step, "state": "running" if session else "queued",
                        "session_id": session[0] if session else None,
                        "started_at": session[1] if session else None, "submitted_at": submitted})
        return out

    def close(self) -> None:
        """The run ended (or was stopped): nothing is in flight any more; the file goes."""
        with self._lock:
            self._closed = True
            self._cases.clear()
            if self._timer is not None:
                self._timer.cancel()
        self.path.unlink(missing_ok=True)

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
        self._changed()

    def _ended(self, case: Case) -> None:
        with self._lock:
            self._cases.pop(id(case), None)
        self._changed()

    def _changed(self) -> None:
        """Write now if the last write is `every_s` old, else once it is (a timer thread)."""
        with self._lock:
            if self._closed or not self.path.parent.is_dir():
                return  # a run directory not made yet: no rollout has started
            wait = self._written_at + self._every_s - self._clock()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._flush)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._written_at = self._clock()
        with self._writing:
            self._write({"updated_at": self._clock(), "pid": os.getpid(), "cases": self.entries()})

    def _write(self, content: dict[str, Any]) -> None:
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            temporary.write_text(json.dumps(content), encoding="utf-8")
            with self._lock:  # not after close: a late callback must not bring the file back
                if not self._closed:
                    os.replace(temporary, self.path)
        except OSError:
            pass  # a view of the run, not the run: a full disk fails rollouts.jsonl's writes instead
        finally:
            temporary.unlink(missing_ok=True)
