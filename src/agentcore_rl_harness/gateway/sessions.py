"""`SessionStore`: the one owner of gateway session state (thread-safe).

A session key is what the agent sends as its API key. Keys are unguessable when generated here.
A finished session stays known as closed, so a late request with its key is refused instead of
silently starting a new session.

Lifecycle limits (`SessionLimits`): `max_turns` caps the model requests of a session (the next
one is refused with `TurnLimitError`, HTTP 429); `context_budget_tokens` bounds prompt + reply of
each turn (applied in `turn.py`); `ttl_s` bounds how long a session may stay open. `reap_expired`
(called by the server's reaper thread) closes sessions past their TTL: their traces are kept as a
`FinishedSession` with `metadata["reaped"] = True`, returned by `finish` and listed by `reaped()`
until collected, and their key is refused from then on.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, HarnessError
from ..records import SampleResult, SamplingParams, Trace, Usage
from .rendering import ParsedReply, Renderer
from .trajectory import HISTORY_MODES, PromptPlan, Turn, TurnTree, chain_metadata

MAX_SESSION_ID_LENGTH = 256


class SessionError(HarnessError):
    """A session key is unknown, finished, or already taken."""


class UnknownSessionError(SessionError):
    pass


class SessionClosedError(SessionError):
    pass


class SessionExistsError(SessionError):
    pass


class TurnLimitError(SessionError):
    """The session used all the turns its limits allow."""


@dataclass(frozen=True)
class SessionLimits:
    """Per-session bounds; None means unlimited."""

    max_turns: int | None = None
    context_budget_tokens: int | None = None
    ttl_s: float | None = None


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


class Session:
    """One agent session: its sampling policy, limits and turn tree, behind a lock."""

    def __init__(self, session_id: str, sampling: SamplingParams, renderer: Renderer,
                 limits: SessionLimits = SessionLimits(), opened_at: float = 0.0, *,
                 history: str = "exact") -> None:
        self.session_id = session_id
        self.sampling = sampling
        self.limits = limits
        self.opened_at = opened_at
        self._tree = TurnTree(renderer, history=history)
        self._lock = threading.Lock()
        self._closed = False
        self._overrides: dict[str, int] = {}
        self._events: dict[str, int] = {}
        self._responses: dict[str, tuple[dict[str, Any], ...]] = {}
        self._turns_started = 0
        self._in_flight = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0

    @property
    def turn_count(self) -> int:
        """Turns recorded so far."""
        with self._lock:
            return len(self._tree.turns)

    def event_count(self, name: str) -> int:
        """How often a lifecycle event (see `count_event`) has happened so far."""
        with self._lock:
            return self._events.get(name, 0)

    def plan(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> PromptPlan:
        with self._lock:
            self._check_open()
            return self._tree.plan(messages, tools)

    def begin_turn(self) -> None:
        """Take a turn slot, or raise `TurnLimitError` when the session has used them all."""
        with self._lock:
            self._check_open()
            cap = self.limits.max_turns
            if cap is not None and self._turns_started >= cap:
                raise TurnLimitError(
                    f"session {self.session_id!r} reached its limit of {cap} turns; finish it "
                    "and open a new one (the limit is GatewayConfig.max_turns)"
                )
            self._turns_started += 1
            self._in_flight += 1

    def end_turn(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def record(self, plan: PromptPlan, sample: SampleResult, reply: ParsedReply, *,
               completion_text: str | None = None) -> Turn:
        with self._lock:
            self._check_open()
            self._prompt_tokens += len(plan.prompt_token_ids)
            self._completion_tokens += len(sample.token_ids)
            return self._tree.record(plan, sample, reply, completion_text=completion_text)

    def count_override(self, name: str) -> None:
        """The agent asked for a sampling value the session does not allow."""
        with self._lock:
            self._overrides[name] = self._overrides.get(name, 0) + 1

    def count_event(self, name: str) -> None:
        """A lifecycle event worth reporting in the session metadata (e.g. client_disconnects)."""
        with self._lock:
            self._events[name] = self._events.get(name, 0) + 1

    def remember_response(self, response_id: str, messages: Sequence[dict[str, Any]]) -> None:
        """Keep a Responses-API conversation so `previous_response_id` can continue it."""
        with self._lock:
            self._responses[response_id] = tuple(messages)

    def recall_response(self, response_id: str) -> tuple[dict[str, Any], ...] | None:
        with self._lock:
            return self._responses.get(response_id)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"session {self.session_id!r} is finished; open a new one")

    def discard(self) -> None:
        """Refuse further turns without building traces (the session was deleted)."""
        with self._lock:
            self._closed = True

    def close(self, *, reaped: bool = False) -> FinishedSession:
        with self._lock:
            self._check_open()
            self._closed = True
            self._responses.clear()
            turns = self._tree.turns
            metadata = chain_metadata(turns)
            metadata["sampling_overrides"] = dict(sorted(self._overrides.items()))
            metadata.update(sorted(self._events.items()))
            metadata["turns_in_flight_at_finish"] = self._in_flight
            metadata["reaped"] = reaped
            return FinishedSession(
                session_id=self.session_id, traces=self._tree.traces(), turns=len(turns),
                usage=Usage(self._prompt_tokens, self._completion_tokens), metadata=metadata,
            )


class SessionStore:
    """Opens, looks up, finishes, reaps and deletes sessions. Safe to call from any thread."""

    def __init__(
        self, *, renderer: Renderer, default_sampling: SamplingParams = SamplingParams(),
        limits: SessionLimits = SessionLimits(), clock: Callable[[], float] = time.monotonic,
        history: str = "exact",
    ) -> None:
        if history not in HISTORY_MODES:
            raise ConfigError(f"history={history!r} is not a history mode; choose one of {', '.join(HISTORY_MODES)}")
        self._renderer = renderer
        self.history = history
        self._default_sampling = default_sampling
        self.limits = limits
        self._clock = clock
        self._lock = threading.RLock()
        self._open: dict[str, Session] = {}
        self._reaped: dict[str, FinishedSession] = {}
        self._finished: set[str] = set()

    def open(self, *, session_id: str | None = None, sampling: SamplingParams | None = None) -> str:
        session_id = secrets.token_urlsafe(32) if session_id is None else session_id
        if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID_LENGTH \
                or not session_id.isprintable() or " " in session_id:
            raise SessionError(
                f"session id {session_id!r} is not usable as an API key: use 1-"
                f"{MAX_SESSION_ID_LENGTH} printable characters without spaces"
            )
        with self._lock:
            if session_id in self._open or session_id in self._finished or session_id in self._reaped:
                raise SessionExistsError(f"session {session_id!r} already exists")
            self._open[session_id] = Session(session_id, sampling or self._default_sampling,
                                             self._renderer, self.limits, self._clock(), history=self.history)
        return session_id

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._open.get(session_id)
            if session is not None:
                return session
            if session_id in self._reaped:
                raise SessionClosedError(
                    f"this session was reaped after its TTL of {self.limits.ttl_s} s; its key no "
                    "longer works (the TTL is GatewayConfig.session_ttl_s)")
            if session_id in self._finished:
                raise SessionClosedError("this session is finished; its key no longer works")
            raise UnknownSessionError("unknown session key: open a session first (POST /admin/sessions)")

    def finish(self, session_id: str) -> FinishedSession:
        """Close the session and return its traces; later requests with its key are refused.

        A session reaped after its TTL returns the traces it had when it was reaped."""
        with self._lock:
            reaped = self._reaped.pop(session_id, None)
            if reaped is not None:
                self._finished.add(session_id)
                return reaped
            session = self.get(session_id)
            finished = session.close()
            del self._open[session_id]
            self._finished.add(session_id)
        return finished

    def reap_expired(self) -> list[FinishedSession]:
        """Close every open session older than the TTL; returns what was reaped now."""
        ttl = self.limits.ttl_s
        if ttl is None:
            return []
        now = self._clock()
        reaped = []
        with self._lock:
            for session_id, session in list(self._open.items()):
                if now - session.opened_at >= ttl:
                    finished = session.close(reaped=True)
                    del self._open[session_id]
                    self._reaped[session_id] = finished
                    reaped.append(finished)
        return reaped

    def reaped(self) -> tuple[FinishedSession, ...]:
        """Sessions reaped after their TTL whose traces nobody has collected with `finish` yet."""
        with self._lock:
            return tuple(self._reaped.values())

    def delete(self, session_id: str) -> None:
        """Forget a session (open, reaped or finished) and its data."""
        with self._lock:
            session = self._open.pop(session_id, None)
            known = session is not None or session_id in self._finished or session_id in self._reaped
            if not known:
                raise UnknownSessionError(f"unknown session {session_id!r}")
            if session is not None:
                session.discard()
            self._finished.discard(session_id)
            self._reaped.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)
