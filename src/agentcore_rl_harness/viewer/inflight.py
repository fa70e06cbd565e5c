"""A running run's rollouts in flight, as its `inflight.json` says (run/inflight.py writes it).

The run rewrites the file about every second while it runs and deletes it at its end. A file
left behind (the run was killed hard) or one not rewritten for `STALE_S` while the run has no
report is shown as stale, not as live; a run with report.json has nothing in flight.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store import INFLIGHT

STALE_S = 60.0  # an inflight.json older than this is a run that stopped writing it


@dataclass(frozen=True)
class Flying:
    """One rollout in flight, as the viewer's table shows it."""

    task: str
    row_id: str
    sample_index: str
    phase: str
    state: str  # "running" (its agent session is open) or "queued" (waiting for a session slot)
    session_id: str
    running_s: float | None  # since its session opened; None while queued

    def cells(self) -> list[str]:
        running = "—" if self.running_s is None else f"{self.running_s:.0f} s"
        return [self.task, self.row_id, self.sample_index, self.phase, self.state, running, self.session_id]


@dataclass(frozen=True)
class InFlight:
    """What the run directory says is in flight: `stale` when the files stopped being updated."""

    cases: tuple[Flying, ...]
    stale: bool
    age_s: float  # since the newest file was written

    def payload(self) -> dict[str, Any]:
        return {"stale": self.stale, "age_s": round(self.age_s, 1),
                "rows": [case.cells() for case in self.cases]}


def read_inflight(run_dir: Path, *, now: float | None = None) -> InFlight | None:
    """The run's in-flight rollouts (its inflight.json, and a sharded run's workers' files), or
    None when there is nothing to show: no file, or the run finished (report.json)."""
    if (run_dir / "report.json").is_file():
        return None
    now = time.time() if now is None else now
    files: list[tuple[float, list[Flying]]] = []
    for path in sorted(run_dir.glob(f"{Path(INFLIGHT).stem}*.json")):
        try:
            stamp = path.stat().st_mtime
            content = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # deleted as the run ended, between the listing and the read
        entries = content.get("cases") if isinstance(content, dict) else None
        files.append((stamp, [_flying(entry, now) for entry in entries or [] if isinstance(entry, dict)]))
    if not files:
        return None
    age = max(0.0, now - max(stamp for stamp, _ in files))
    # a killed worker's file left beside live ones (`pytest -n`, then a resume) is not in flight
    cases = [case for stamp, found in files if age > STALE_S or now - stamp <= STALE_S for case in found]
    return InFlight(cases=tuple(sorted(cases, key=lambda case: -(case.running_s or -1.0))),
                    stale=age > STALE_S, age_s=age)


def _flying(entry: dict[str, Any], now: float) -> Flying:
    started = entry.get("started_at")
    step = entry.get("step")
    phase = str(entry.get("phase") or "")
    return Flying(
        task=str(entry.get("task") or ""), row_id=str(entry.get("row_id") or ""),
        sample_index=str(entry.get("sample_index", "")),
        phase=phase if step is None else f"{phase} (step {step})",
        state=str(entry.get("state") or ""), session_id=str(entry.get("session_id") or ""),
        running_s=max(0.0, now - started) if isinstance(started, (int, float)) else None,
    )
