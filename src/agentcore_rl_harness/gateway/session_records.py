"""The frozen records a gateway session hands out (`sessions.py`): what a turn's start tells it
(`TurnStart`) and a finished session's traces, turns and usage (`FinishedSession`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..records import Trace, Usage


@dataclass(frozen=True)
class TurnStart:
    """What a turn's start tells its session, in one locked call (`Session.start_turn`): the
    agent's ignored sampling overrides, the limits the turn ran into, and lifecycle events."""

    overrides: tuple[str, ...] = ()
    limits_hit: tuple[str, ...] = ()
    events: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinishedSession:
    session_id: str
    traces: tuple[Trace, ...]
    turns: int
    usage: Usage
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "traces": [trace.to_json() for trace in self.traces],
            "turns": self.turns,
            "usage": {"prompt_tokens": self.usage.prompt_tokens,
                      "completion_tokens": self.usage.completion_tokens},
            "metadata": dict(self.metadata),
        }
