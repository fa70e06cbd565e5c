"""Agent answers that are not the result yet (agentcore-rl-toolkit 0.2.0's two app classes),
followed the same way by the local and the AgentCore runtimes.

- `AgentCoreRuntimeApp` start/get: a payload carrying `_agentcore_runtime` =
  `{version: 1, operation: "start", invocation_id, background: true}` starts an addressable
  invocation and is answered with its state `{version, invocation_id, status, result?, error?}`
  (status `in_progress`, `completed`, `interrupted` or `not_found`); the payload
  `{"_agentcore_runtime": {version: 1, operation: "get", invocation_id}}` on the same session
  reads it again. An app built with `background=True` answers a plain payload with such a state
  too. An app that ignores the envelope answers with its result, which is used as it is.
- `AgentCoreRLApp.rollout_entrypoint`: answers `{"status": "processing"}` at once and runs the
  handler in the background, keeping `/ping` at `HealthyBusy` until it ends; its result is saved
  only to S3 (when `_rollout` has `exp_id`, `input_id`, `s3_bucket`: `result_mode=s3`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ._results import ResultError, as_result

RESULT_MODES = ("inline", "s3", "start_get")
ENVELOPE_KEY = "_agentcore_runtime"
VERSION = 1
_STATES = ("in_progress", "completed", "interrupted", "not_found")
_STATE_KEYS = frozenset({"version", "invocation_id", "status", "result", "error"})
_BACKGROUND_KEYS = frozenset({"status", "s3_bucket", "result_key"})
BACKGROUND_STATES = ("processing", "accepted")

Get = Callable[[str], Awaitable[Any]]  # invocation id -> the agent's answer to a `get`


class InvocationFailed(Exception):
    """The agent's invocation ended without a result (its failure: an agent_error)."""


def start_payload(payload: dict[str, Any], invocation_id: str | None = None) -> dict[str, Any]:
    """`payload` with a background start envelope (a fresh invocation id unless given)."""
    if ENVELOPE_KEY in payload:
        raise ValueError(f"the payload already has the reserved key {ENVELOPE_KEY!r}; rename it")
    envelope = {
        "version": VERSION,
        "operation": "start",
        "invocation_id": invocation_id or uuid.uuid4().hex,
        "background": True,
    }
    return {**payload, ENVELOPE_KEY: envelope}


def prepare_payload(
    payload: dict[str, Any], *, result_mode: str, exp_id: str, bucket: str | None,
    input_id: str, session_id: str,
) -> tuple[dict[str, Any], str | None]:
    """The payload for a result mode, and (s3) the result's key. The S3 triple goes out only in
    `s3` mode: ART's `AgentCoreRLApp` answers 500 to a partial one."""
    if result_mode == "s3":
        from ._s3_results import with_s3_target

        return with_s3_target(
            payload, exp_id=exp_id, bucket=str(bucket), input_id=input_id, session_id=session_id
        )
    if result_mode == "start_get":
        return start_payload(payload), None
    return payload, None


def get_payload(invocation_id: str) -> dict[str, Any]:
    return {ENVELOPE_KEY: {"version": VERSION, "operation": "get", "invocation_id": invocation_id}}


def invocation_state(answer: Any) -> dict[str, Any] | None:
    """The answer as a start/get invocation state, or None if it is something else."""
    if (
        isinstance(answer, dict)
        and answer.get("version") == VERSION
        and isinstance(answer.get("invocation_id"), str)
        and answer.get("status") in _STATES
        and set(answer) <= _STATE_KEYS
    ):
        return answer
    return None


def is_background_accept(answer: Any) -> bool:
    """`AgentCoreRLApp.rollout_entrypoint`'s (or the harness helper's) at-once answer."""
    return (
        isinstance(answer, dict)
        and answer.get("status") in BACKGROUND_STATES
        and set(answer) <= _BACKGROUND_KEYS
    )


async def settle(
    answer: dict[str, Any],
    *,
    get: Get,
    poll_initial_s: float,
    poll_max_s: float,
) -> dict[str, Any]:
    """The agent's result from its first answer: a start/get state is followed with `get` until
    it ends; a background accept (its result goes only to S3, which this result mode does not
    read) is an `InvocationFailed` naming the result mode that works, at once."""
    state = invocation_state(answer)
    if state is not None:
        return await _follow(state, get, poll_initial_s, poll_max_s)
    if not is_background_accept(answer):
        return answer
    raise InvocationFailed(BACKGROUND_ACCEPT_FIX.format(answer=answer))


BACKGROUND_ACCEPT_FIX = (
    "the agent answered {answer!r} at once and runs in the background (agentcore-rl-toolkit's "
    "AgentCoreRLApp.rollout_entrypoint); it saves its result only to S3, which this result mode "
    "does not read, so the rollout would have no result. Use --agentcore-rl-set "
    "runtime.result_mode=s3 (the local runtime receives it on a loopback S3 stand-in: no AWS "
    "account or bucket needed; on AgentCore add runtime.s3_bucket=BUCKET)"
)


async def _follow(
    state: dict[str, Any], get: Get, poll_initial_s: float, poll_max_s: float
) -> dict[str, Any]:
    invocation_id = state["invocation_id"]
    delay = poll_initial_s
    while state["status"] == "in_progress":
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, poll_max_s)
        answer = await get(invocation_id)
        following = invocation_state(answer)
        if following is None or following["invocation_id"] != invocation_id:
            raise InvocationFailed(
                f"the agent answered a get of invocation {invocation_id} with {answer!r:.300}, "
                "not that invocation's state"
            )
        state = following
    if state["status"] == "completed" and "result" in state and "error" not in state:
        try:
            return as_result(state["result"])
        except ResultError as exc:  # the invocation completed with None
            raise InvocationFailed(f"invocation {invocation_id}: {exc}") from None
    detail = state.get("error") or "no result"
    raise InvocationFailed(f"invocation {invocation_id} ended {state['status']}: {detail}")
