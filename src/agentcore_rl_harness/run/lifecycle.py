"""`RunState`: where a run stands, one explicit state instead of "is it None yet?" checks."""

from __future__ import annotations

from enum import Enum


class RunState(Enum):
    """A run's lifecycle, in order; `Run.start` and `Run.finish` move it on."""

    CONFIGURED = "configured"  # options and config read, directory named; nothing started
    TRAINING = "training"  # `run` / `train`: the pre-eval, warm-up and training before the items
    ITEMS = "items"  # the items' rollouts are in flight and scored as pytest reaches each item
    FINISHED = "finished"  # reports written, gates judged
    INTERRUPTED = "interrupted"  # stopped (Ctrl-C, SIGTERM) after it opened its directory

    @property
    def ended(self) -> bool:
        return self in (RunState.FINISHED, RunState.INTERRUPTED)
