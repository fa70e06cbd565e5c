"""A pass-through turn: the agent's messages go to a hosted chat model as they are, its reply comes
back in the agent's wire, and no tokens are captured.

For evaluation baselines only (`sampler=hosted`): the model the agent uses in production answers
through the same gateway, on the same rows, so a report can pair it with the RL-trained policy.
A hosted API returns text and tool calls, not the token ids and logprobs a trainer needs, so such
a turn records nothing in the session's tree: the session counts it (`passthrough_turns`, its
usage as the API reported it) and finishes with no traces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..records import SamplingParams, Usage
from .rendering import ParsedReply


@dataclass(frozen=True)
class ChatReply:
    """A hosted model's answer to one turn."""

    reply: ParsedReply
    finish_reason: str  # "stop" (also after tool calls) or "length"
    usage: Usage  # as the hosted API counted it (its own tokenizer)


@runtime_checkable
class ChatBackend(Protocol):
    """Messages in, a reply out: a hosted chat API (OpenAI-compatible, Bedrock Converse).

    `messages` and `tools` are the gateway's internal form (`messages.py`); `params` is the
    session's sampling (temperature, top_p, max_tokens are sent; token-level fields are not).
    Failures raise `SamplingError` saying what failed and how to fix it.
    """

    async def reply(
        self, *, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
        params: SamplingParams,
    ) -> ChatReply: ...
