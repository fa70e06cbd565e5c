"""`SessionStore`: the one owner of gateway session state (thread-safe).

A session key is what the agent sends as its API key. Keys are unguessable when generated here.
A finished session stays known as closed, so a late request with its key is refused instead of
silently starting a new session.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import HarnessError
from ..records import SampleResult, SamplingParams, Trace, Usage
from .rendering import ParsedReply, Renderer
from .trajectory import PromptPlan, Turn, TurnTree, chain_metadata

MAX_SESSION_ID_LENGTH = 256


class SessionError(HarnessError):
    """A session key is unknown, finished, or already taken."""


class UnknownSessionError(SessionError):
    pass


class SessionClosedError(SessionError):
    pass


class SessionExistsError(SessionError):
    pass


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
    """One agent session: its sampling policy and its turn tree, behind a lock."""

    def __init__(self, session_id: str, sampling: SamplingParams, renderer: Renderer) -> None:
        self.session_id = session_id
        self.sampling = sampling
        self._tree = TurnTree(renderer)
        self._lock = threading.Lock()
        self._closed = False
        self._overrides: dict[str, int] = {}
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def plan(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> PromptPlan:
        with self._lock:
            self._check_open()
            return self._tree.plan(messages, tools)

    def record(self, plan: PromptPlan, sample: SampleResult, reply: ParsedReply) -> Turn:
        with self._lock:
            self._check_open()
            self._prompt_tokens += len(plan.prompt_token_ids)
            self._completion_tokens += len(sample.token_ids)
            return self._tree.record(plan, sample, reply)

    def count_override(self, name: str) -> None:
        """The agent asked for a sampling value the session does not allow."""
        with self._lock:
            self._overrides[name] = self._overrides.get(name, 0) + 1

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"session {self.session_id!r} is finished; open a new one")

    def discard(self) -> None:
        """Refuse further turns without building traces (the session was deleted)."""
        with self._lock:
            self._closed = True

    def close(self) -> FinishedSession:
        with self._lock:
            self._check_open()
            self._closed = True
            turns = self._tree.turns
            metadata = chain_metadata(turns)
            metadata["sampling_overrides"] = dict(sorted(self._overrides.items()))
            return FinishedSession(
                session_id=self.session_id, traces=self._tree.traces(), turns=len(turns),
                usage=Usage(self._prompt_tokens, self._completion_tokens), metadata=metadata,
            )


class SessionStore:
    """Opens, looks up, finishes and deletes sessions. Safe to call from any thread."""

    def __init__(self, *, renderer: Renderer, default_sampling: SamplingParams = SamplingParams()) -> None:
        self._renderer = renderer
        self._default_sampling = default_sampling
        self._lock = threading.RLock()
        self._open: dict[str, Session] = {}
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
            if session_id in self._open or session_id in self._finished:
                raise SessionExistsError(f"session {session_id!r} already exists")
            self._open[session_id] = Session(session_id, sampling or self._default_sampling, self._renderer)
        return session_id

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._open.get(session_id)
            if session is not None:
                return session
            if session_id in self._finished:
                raise SessionClosedError("this session is finished; its key no longer works")
            raise UnknownSessionError("unknown session key: open a session first (POST /admin/sessions)")

    def finish(self, session_id: str) -> FinishedSession:
        """Close the session and return its traces; later requests with its key are refused."""
        with self._lock:
            session = self.get(session_id)
            finished = session.close()
            del self._open[session_id]
            self._finished.add(session_id)
        return finished

    def delete(self, session_id: str) -> None:
        """Forget a session (open or finished) and its data."""
        with self._lock:
            session = self._open.pop(session_id, None)
            if session is None and session_id not in self._finished:
                raise UnknownSessionError(f"unknown session {session_id!r}")
            if session is not None:
                session.discard()
            self._finished.discard(session_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)
