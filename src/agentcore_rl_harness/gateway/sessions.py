"""`SessionStore`: the one owner of gateway session state (thread-safe).

A session key is what the agent sends as its API key. Keys are unguessable when generated here.
A finished session stays known as closed for `FINISHED_KEYS_KEPT_S` (at most `MAX_FINISHED_KEYS`,
`recent_keys.RecentKeys`), so a late request with its key is refused as finished; later it is
an unknown key (still refused).

Lifecycle limits (`records.SessionLimits`, which says what each means): a session over
`max_turns` is refused with `TurnLimitError` (HTTP 429); `context_budget_tokens` is applied in
`turn.py`. An expired session is reaped: the request that finds it expired is refused
(`SessionExpiredError`, HTTP 401 `session_expired`), and `reap_expired` (the server's reaper
thread) closes expired sessions whose turns have all ended; its traces are kept as a
`FinishedSession` with `metadata["reaped"] = True`, returned by `finish` and listed by
`reaped()` until collected; its key is refused from then on.

Every limit a session hits is named in `metadata["limits_hit"]` (session and each trace), so the
rollout record says why a session ended short. Hosted-model turns count, with no trace.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..records import HistoryMode, SampleResult, SamplingParams, SessionLimits, TaskLimits, Trace, Usage
from .forcing import ScriptError, normalize_script
from .known_history import KnownHistory
from .recent_keys import RecentKeys
from .session_errors import (
    SessionClosedError, SessionError, SessionExistsError, SessionExpiredError, TurnLimitError, UnknownSessionError,
)
from .rendering import Message, ParsedReply, Renderer
from .task_budget import TaskBudget
from .trajectory import PromptPlan, Turn, TurnTree, chain_metadata

__all__ = ["LIMIT_NAMES", "FinishedSession", "Session", "SessionClosedError", "SessionError", "SessionExistsError",
           "SessionExpiredError", "SessionLimits", "SessionStore", "TurnLimitError", "TurnStart", "UnknownSessionError"]

MAX_SESSION_ID_LENGTH = 256

# The limit names recorded in `limits_hit`: the `gateway.*` config keys.
LIMIT_NAMES = ("max_turns", "context_budget_tokens", "idle_ttl_s", "max_lifetime_s")


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


class Session:
    """One agent session: its sampling policy, limits and turn tree, behind a lock."""

    def __init__(self, session_id: str, sampling: SamplingParams, renderer: Renderer,
                 limits: SessionLimits = SessionLimits(), clock: Callable[[], float] = time.monotonic, *,
                 history: str = "exact", script: Sequence[Message] | None = None,
                 score_forced: bool = True, task_limits: TaskLimits = TaskLimits()) -> None:
        self.session_id = session_id
        self.budget = TaskBudget(task_limits)  # the task's own limits (`task_budget.py`)
        self.script: tuple[Message, ...] | None = None if script is None else tuple(script)
        self.score_forced = score_forced  # forced turns' logprobs from the policy (else zeros)
        self._script_used = 0
        self.forced_logprobs: str | None = None  # "policy" or "zero" once a turn was forced
        self.sampling = sampling
        self.limits = limits
        self._clock = clock
        self.opened_at = self.last_active = clock()
        self._tree = TurnTree(renderer, history=history)
        self._lock = threading.Lock()
        self._closed = False
        self._overrides: dict[str, int] = {}
        self._events: dict[str, int] = {}
        self._responses: dict[str, tuple[Sequence[dict[str, Any]], dict[str, Any]]] = {}
        self.known_history = KnownHistory()  # what the wires already checked (known_history.py)
        self._turns_started = 0
        self._in_flight = 0
        self._limits_hit: set[str] = set()
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
            self.last_active = self._clock()
            return self._tree.plan(messages, tools)

    def expired(self, now: float) -> str | None:
        """The limit (`idle_ttl_s` or `max_lifetime_s`) this session has outlived at `now`, if any.
        A session with a turn being sampled is not idle."""
        with self._lock:
            lifetime, idle = self.limits.max_lifetime_s, self.limits.idle_ttl_s
            if lifetime is not None and now - self.opened_at >= lifetime:
                return "max_lifetime_s"
            if idle is not None and not self._in_flight and now - self.last_active >= idle:
                return "idle_ttl_s"
            return None

    @property
    def turns_in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def hit_limit(self, name: str) -> None:
        """Note that the session ran into limit `name` (one of `LIMIT_NAMES`)."""
        with self._lock:
            self._limits_hit.add(name)

    def start_turn(self, start: TurnStart) -> None:
        """Take a turn slot and note what the turn's start tells (`start`), under one lock; or
        raise `TurnLimitError` (noting nothing else) when the session has used all its turns."""
        with self._lock:
            self._check_open()
            cap = self.limits.max_turns
            if cap is not None and self._turns_started >= cap:
                self._limits_hit.add("max_turns")
                raise TurnLimitError(
                    f"session {self.session_id!r} reached its limit of {cap} turns; finish it "
                    "and open a new one (the limit is gateway.max_turns, --max-turns)"
                )
            self.budget.check_turn(self._turns_started, self.session_id)
            self._turns_started += 1
            self._in_flight += 1
            self.last_active = self._clock()
            for name in start.overrides:
                self._overrides[name] = self._overrides.get(name, 0) + 1
            self._limits_hit.update(start.limits_hit)
            for name in start.events:
                self._events[name] = self._events.get(name, 0) + 1

    def next_scripted(self) -> tuple[int, Message]:
        """The next turn of a scripted session (`forcing.py`), and its index; a `ScriptError`
        when the agent asks for more turns than the script has."""
        with self._lock:
            assert self.script is not None, "not a scripted session"
            index = self._script_used
            if index >= len(self.script):
                self._events["script_exhausted"] = self._events.get("script_exhausted", 0) + 1
                raise ScriptError(
                    f"session {self.session_id!r} is teacher-forced from a script of {len(self.script)} "
                    f"assistant turns and the agent asked for turn {index + 1}; give the oracle's "
                    "_script every turn the agent asks for", code="script_exhausted")
            self._script_used += 1
            return index, self.script[index]

    def end_turn(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self.last_active = self._clock()

    def record(self, plan: PromptPlan, sample: SampleResult, reply: ParsedReply, *,
               completion_text: str | None = None) -> Turn:
        with self._lock:
            self._check_open()
            self._prompt_tokens += len(plan.prompt_token_ids)
            self._completion_tokens += len(sample.token_ids)
            self.budget.recorded(completion_tokens=len(sample.token_ids), tool_calls=len(reply.tool_calls))
            return self._tree.record(plan, sample, reply, completion_text=completion_text)

    def record_passthrough(self, usage: Usage) -> None:
        with self._lock:
            self._check_open()
            self._events["passthrough_turns"] = self._events.get("passthrough_turns", 0) + 1
            self._prompt_tokens += usage.prompt_tokens
            self._completion_tokens += usage.completion_tokens

    def count_override(self, name: str) -> None:
        """The agent asked for a sampling value the session does not allow."""
        with self._lock:
            self._overrides[name] = self._overrides.get(name, 0) + 1

    def count_event(self, name: str) -> None:
        """A lifecycle event worth reporting in the session metadata (e.g. client_disconnects)."""
        with self._lock:
            self._events[name] = self._events.get(name, 0) + 1

    def remember_response(self, response_id: str, messages: Sequence[dict[str, Any]], reply: dict[str, Any]) -> None:
        """Keep a Responses conversation for `previous_response_id`: its messages (immutable, as given), its reply."""
        with self._lock:
            self._responses[response_id] = (messages, reply)

    def recall_response(self, response_id: str) -> tuple[dict[str, Any], ...] | None:
        with self._lock:
            return (*kept[0], kept[1]) if (kept := self._responses.get(response_id)) else None

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"session {self.session_id!r} is finished; open a new one")

    def discard(self) -> None:
        """Refuse further turns without building traces (the session was deleted)."""
        with self._lock:
            self._closed = True

    def close(self, *, reaped: str | None = None) -> FinishedSession:
        """Finish the session; `reaped` names the limit it expired by, when it did."""
        with self._lock:
            self._check_open()
            self._closed = True
            self._responses.clear()
            self.known_history.clear()
            if reaped is not None:
                self._limits_hit.add(reaped)
            turns = self._tree.turns
            metadata = chain_metadata(turns)
            metadata["sampling_overrides"] = dict(sorted(self._overrides.items()))
            metadata.update(sorted(self._events.items()))
            metadata["turns_in_flight_at_finish"] = self._in_flight
            metadata["reaped"] = reaped is not None
            limits_hit = [name for name in LIMIT_NAMES if name in self._limits_hit] + self.budget.hit
            metadata["limits_hit"] = limits_hit
            extra: dict[str, Any] = {"limits_hit": limits_hit} if limits_hit else {}
            if self.script is not None:
                forced = {"teacher_forced": True, "forced_logprobs": self.forced_logprobs,
                          "script_turns_used": self._script_used, "script_turns": len(self.script)}
                metadata.update(forced)
                extra.update(forced)
            traces = self._tree.traces()
            if extra:
                traces = tuple(dataclasses.replace(t, metadata={**t.metadata, **extra}) for t in traces)
            return FinishedSession(session_id=self.session_id, traces=traces,
                                   turns=len(turns) + self._events.get("passthrough_turns", 0),
                                   usage=Usage(self._prompt_tokens, self._completion_tokens), metadata=metadata)


FINISHED_KEYS_KEPT_S = 300.0
MAX_FINISHED_KEYS = 65_536


class SessionStore:
    """Opens, looks up, finishes, reaps and deletes sessions. Safe to call from any thread."""

    def __init__(
        self, *, renderer: Renderer, default_sampling: SamplingParams = SamplingParams(),
        limits: SessionLimits = SessionLimits(), clock: Callable[[], float] = time.monotonic,
        history: str = "exact",
    ) -> None:
        history = HistoryMode.parse(history, key="history").value
        try:
            limits.check()
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self._renderer = renderer
        self.history = history
        self._default_sampling = default_sampling
        self.limits = limits
        self._clock = clock
        self._lock = threading.RLock()
        self._open: dict[str, Session] = {}
        self._reaped: dict[str, FinishedSession] = {}
        self._finished = RecentKeys(keep_s=FINISHED_KEYS_KEPT_S, max_keys=MAX_FINISHED_KEYS, clock=clock)

    def open(self, *, session_id: str | None = None, sampling: SamplingParams | None = None,
             script: Sequence[Mapping[str, Any]] | None = None, score_forced: bool = True,
             task_limits: TaskLimits = TaskLimits()) -> str:
        """Open a session; with `script` (assistant turns, `forcing.normalize_script`) its model
        calls are teacher-forced from it instead of sampled, their logprobs scored under the
        policy unless `score_forced` is false (then zeros, `forced_logprobs: "zero"`); `task_limits`:
        the task's own limits on top of the store's (`task_budget.py`)."""
        forced = None if script is None else normalize_script(script)
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
                                             self._renderer, self.limits, self._clock, history=self.history,
                                             script=forced, score_forced=score_forced, task_limits=task_limits)
        return session_id

    def get(self, session_id: str) -> Session:
        """The open session with this key; an expired one is refused (and reaped when idle)."""
        with self._lock:
            session = self._open.get(session_id)
            if session is not None:
                limit = session.expired(self._clock())
                if limit is None:
                    return session
                self._reap(session, limit)
                raise SessionExpiredError(self._expired_message(limit))
            reaped = self._reaped.get(session_id)
            if reaped is not None:
                raise SessionExpiredError(self._expired_message(reaped.metadata["limits_hit"]))
            if session_id in self._finished:
                raise SessionClosedError("this session is finished; its key no longer works")
            raise UnknownSessionError("unknown session key: open a session first (POST /admin/sessions)")

    def finish(self, session_id: str) -> FinishedSession:
        """Close the session and return its traces; later requests with its key are refused.

        A session reaped as expired returns the traces it had when it was reaped."""
        with self._lock:
            reaped = self._reaped.pop(session_id, None)
            if reaped is not None:
                self._finished.add(session_id)
                return reaped
            session = self._open.get(session_id) or self.get(session_id)  # get raises why not
            finished = session.close()
            del self._open[session_id]
            self._finished.add(session_id)
        return finished

    def _expired_message(self, limit: str | Sequence[str]) -> str:
        if not isinstance(limit, str):  # a reaped session's limits_hit: the expiry is the last
            limit = next(name for name in reversed(LIMIT_NAMES) if name in limit)
        if limit == "idle_ttl_s":
            why = f"made no request for {self.limits.idle_ttl_s:g} s (gateway.idle_ttl_s, --idle-ttl-s)"
        else:
            why = (f"reached its lifetime of {self.limits.max_lifetime_s:g} s "
                   "(gateway.max_lifetime_s, --max-lifetime-s)")
        return f"this session expired: it {why}; its key no longer works, open a new session"

    def _reap(self, session: Session, limit: str) -> FinishedSession | None:
        """Close an expired session (lock held), unless a turn is still being sampled: that
        turn's tokens are recorded first, and a later reap closes it."""
        if session.turns_in_flight:
            return None
        finished = session.close(reaped=limit)
        del self._open[session.session_id]
        self._reaped[session.session_id] = finished
        return finished

    def reap_expired(self) -> list[FinishedSession]:
        """Close every open session past its idle TTL or lifetime; returns what was reaped now."""
        if self.limits.idle_ttl_s is None and self.limits.max_lifetime_s is None:
            return []
        now = self._clock()
        reaped = []
        with self._lock:
            for session in list(self._open.values()):
                limit = session.expired(now)
                finished = None if limit is None else self._reap(session, limit)
                if finished is not None:
                    reaped.append(finished)
        return reaped

    def reaped(self) -> tuple[FinishedSession, ...]:
        """Sessions reaped as expired whose traces nobody has collected with `finish` yet."""
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
