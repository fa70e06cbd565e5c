"""What a BedrockAgentCoreApp answers on /invocations: a JSON body, or a `data:` event stream.

Shared by the local and the AgentCore runtimes so both read an agent's answer the same way.
"""

from __future__ import annotations

import json
from typing import Any

# The event BedrockAgentCoreApp streams when a generator handler raises.
STREAM_ERROR_MESSAGE = "An error occurred during streaming"


class ResultError(Exception):
    """The body is not a usable result (str is the reason); `streamed_error` marks an agent
    exception reported in the stream."""

    def __init__(self, message: str, *, streamed_error: bool = False) -> None:
        super().__init__(message)
        self.streamed_error = streamed_error


NO_RESULT = (
    "the agent returned nothing (None / JSON null): its entrypoint must return its result, e.g. "
    "`return {\"answer\": answer}` (a handler that only prints, or a missing `return`, gives None)"
)


def as_result(value: Any) -> dict[str, Any]:
    """A result is a JSON object; any other JSON value is wrapped as {"output": value}; None is
    no result (`ResultError`), not a wrong answer."""
    if value is None:
        raise ResultError(NO_RESULT)
    return value if isinstance(value, dict) else {"output": value}


def parse_invocation_body(body: bytes, content_type: str) -> dict[str, Any]:
    """The agent's result: the JSON body, or the last `data:` event of a streamed body."""
    if content_type.startswith("text/event-stream"):
        events = []
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("data:"):
                try:
                    events.append(json.loads(line[5:].strip()))
                except json.JSONDecodeError:
                    raise ResultError(
                        f"agent streamed an event that is not JSON: {line[:200]!r}"
                    ) from None
        if not events:
            raise ResultError("agent streamed no `data:` events")
        last = events[-1]
        if isinstance(last, dict) and last.get("message") == STREAM_ERROR_MESSAGE:
            raise ResultError(
                f"agent raised while streaming: {last.get('error_type')}: {last.get('error')}",
                streamed_error=True,
            )
        return as_result(last)
    try:
        return as_result(json.loads(body))
    except ValueError:
        raise ResultError(
            f"agent answered with a body that is neither JSON nor a `data:` stream "
            f"(content type {content_type!r}): {body[:200]!r}"
        ) from None
