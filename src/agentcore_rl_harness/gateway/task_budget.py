"""A task's per-episode limits inside one gateway session (`@arl.task(limits=...)`).

The run-wide limits are the session's `SessionLimits`; a task may ask for stricter ones
(`records.TaskLimits`). `TaskBudget` counts what the session used against them, called under the
session's lock: `check_turn` refuses a model request once a limit is used up (`TurnLimitError`,
HTTP 429 `turn_limit_exceeded`), `tokens_left` cuts a turn's `max_tokens` to the sampled tokens
the task still allows, `recorded` counts each reply's tokens and tool calls. Each limit the
session ran into is named in `hit` as `task.<limit>` (it goes into `metadata["limits_hit"]`).
"""

from __future__ import annotations

from ..records import TaskLimits
from .session_errors import TurnLimitError

# The names `limits_hit` gives a task's limits (the run's own limits keep their gateway.* names).
TASK_LIMIT_NAMES = ("task.max_tokens", "task.max_turns", "task.max_tool_calls")


class TaskBudget:
    """What one session used of its task's limits; not thread-safe (the session locks)."""

    def __init__(self, limits: TaskLimits = TaskLimits()) -> None:
        self.limits = limits
        self.completion_tokens = 0
        self.tool_calls = 0
        self.hit: list[str] = []

    def _note(self, name: str) -> None:
        if name not in self.hit:
            self.hit.append(name)

    def check_turn(self, turns_started: int, session_id: str) -> None:
        """Refuse the next model request when a task limit is used up (naming it)."""
        limits = self.limits
        why = None
        if limits.max_turns is not None and turns_started >= limits.max_turns:
            name, why = "task.max_turns", f"its task's limit of {limits.max_turns} model turns"
        elif limits.max_tokens is not None and self.completion_tokens >= limits.max_tokens:
            name, why = "task.max_tokens", (f"its task's limit of {limits.max_tokens} sampled tokens "
                                            f"({self.completion_tokens} used)")
        elif limits.max_tool_calls is not None and self.tool_calls > limits.max_tool_calls:
            name, why = "task.max_tool_calls", (f"its task's limit of {limits.max_tool_calls} tool calls "
                                                f"({self.tool_calls} made)")
        if why is not None:
            self._note(name)
            raise TurnLimitError(f"session {session_id!r} reached {why}; the episode ends here "
                                 "(the limit is the task's @arl.task(limits=...))")

    def tokens_left(self) -> int | None:
        """Sampled tokens the task still allows this session (None: no task token limit)."""
        if self.limits.max_tokens is None:
            return None
        return max(0, self.limits.max_tokens - self.completion_tokens)

    def recorded(self, *, completion_tokens: int, tool_calls: int) -> None:
        """Count one recorded reply; a reply that uses up or passes a limit hits it."""
        self.completion_tokens += completion_tokens
        self.tool_calls += tool_calls
        limits = self.limits
        if limits.max_tokens is not None and self.completion_tokens >= limits.max_tokens:
            self._note("task.max_tokens")
        if limits.max_tool_calls is not None and self.tool_calls > limits.max_tool_calls:
            self._note("task.max_tool_calls")
