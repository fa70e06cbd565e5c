"""`ExtraSessions`: a task test's extra agent sessions, opened by hand (the `agentcore_session`
fixture), beside the one the harness ran for its case."""

from __future__ import annotations

import dataclasses
from typing import Any

from .cases import Case
from .compose import Harness
from .scoring import RolloutHandle


class ExtraSessions:
    """Open extra agent sessions by hand from a task test (e.g. a second opinion)."""

    def __init__(self, harness: Harness, case: Case) -> None:
        self._harness = harness
        self._case = case

    def run(self, row: dict[str, Any] | None = None) -> RolloutHandle:
        """Run the task's agent once more on `row` (default: this case's row)."""
        case = self._case if row is None else dataclasses.replace(
            self._case, row={"id": self._case.row_id, **row}
        )
        return RolloutHandle(self._harness.loop.run(self._harness.run_case(case)))
