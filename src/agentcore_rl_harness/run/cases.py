"""The run's units of work: a `Case` (task, row, sample) and the `Episode` that ran it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..records import SessionOutcome, Trace, Usage
from ..tasks import TaskSpec


@dataclass(frozen=True)
class Case:
    """One pytest item of a task: a dataset row and a sample index within its group."""

    spec: TaskSpec
    row: dict[str, Any]
    sample_index: int
    phase: str
    step: int | None = None

    @property
    def row_id(self) -> str:
        return str(self.row["id"])

    @property
    def group_id(self) -> str:
        suffix = "" if self.step is None else f"/{self.step}"
        return f"{self.spec.name}/{self.row_id}/{self.phase}{suffix}"


@dataclass(frozen=True)
class Episode:
    """What came back from one agent session, before the task scored it."""

    case: Case
    session_id: str
    outcome: SessionOutcome
    traces: tuple[Trace, ...]
    turns: int
    usage: Usage
    session_metadata: dict[str, Any] = field(default_factory=dict)


def case_seed(run_seed: int, case: Case) -> int:
    """The sampling seed of one case: stable across runs and resumes, distinct per case."""
    key = f"{run_seed}/{case.spec.name}/{case.row_id}/{case.sample_index}/{case.phase}/{case.step}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
