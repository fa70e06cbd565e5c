"""A parsed reply as every wire returns it: its tool calls with fresh ids, and the internal
assistant message it becomes in the next request's history. Pure."""

from __future__ import annotations

from typing import Any

from .messages import Message, assistant, new_id, tool_call
from .rendering import ParsedReply

__all__ = ["reply_message", "reply_tool_calls"]


def reply_tool_calls(reply: ParsedReply, prefix: str = "call_") -> list[dict[str, Any]]:
    """The reply's tool calls in the internal form, with fresh ids (`prefix`: the wire's, e.g.
    Anthropic's "toolu_")."""
    return [tool_call(new_id(prefix), call.name, call.arguments) for call in reply.tool_calls]


def reply_message(reply: ParsedReply, calls: list[dict[str, Any]]) -> Message:
    """The internal assistant message a reply is returned as (on every wire)."""
    return assistant(reply.content, reasoning=reply.reasoning, tool_calls=calls)
