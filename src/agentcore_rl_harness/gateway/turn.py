"""One chat turn: render -> sample -> parse -> record, under the session's sampling policy.

The session's sampling wins over what the agent asks for: the agent may only lower `max_tokens`.
Every other attempted change (temperature, top_p, top_k, seed, stop, a higher max_tokens) is
ignored and counted in the session metadata, so a trainer sees the policy it configured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SamplingError
from ..records import SampleResult, SamplingParams, Usage
from .rendering import ParsedReply, Renderer
from .sampling import SamplingBackend
from .sessions import Session
from .trajectory import Turn


@dataclass(frozen=True)
class RequestedSampling:
    """What the agent's request asked for (None where it did not say)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class TurnResult:
    reply: ParsedReply
    sampled_finish: str
    usage: Usage
    turn: Turn


def effective_sampling(
    session: SamplingParams, requested: RequestedSampling, stop_token_ids: Sequence[int]
) -> tuple[SamplingParams, list[str]]:
    """The params to sample with, and the names of the agent's ignored overrides."""
    overrides = [
        name for name in ("temperature", "top_p", "top_k", "seed")
        if getattr(requested, name) is not None and getattr(requested, name) != getattr(session, name)
    ]
    if requested.stop:
        overrides.append("stop")
    max_tokens = session.max_tokens
    if requested.max_tokens is not None:
        if requested.max_tokens > session.max_tokens:
            overrides.append("max_tokens")
        else:
            max_tokens = max(1, requested.max_tokens)
    stops = tuple(dict.fromkeys((*stop_token_ids, *session.stop_token_ids)))
    return dataclasses.replace(session, max_tokens=max_tokens, stop_token_ids=stops), overrides


def _check_sample(sample: SampleResult) -> None:
    if len(sample.logprobs) != len(sample.token_ids):
        raise SamplingError(
            f"the sampler returned {len(sample.token_ids)} tokens but {len(sample.logprobs)} "
            "logprobs; a sampler must return one logprob per sampled token"
        )


async def run_turn(
    *, session: Session, sampler: SamplingBackend, renderer: Renderer,
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
    requested: RequestedSampling,
) -> TurnResult:
    """Sample one assistant reply for `messages` and record it in the session's tree."""
    plan = session.plan(messages, tools)
    params, overrides = effective_sampling(session.sampling, requested, renderer.stop_token_ids)
    for name in overrides:
        session.count_override(name)
    sample = await sampler.sample(prompt_token_ids=plan.prompt_token_ids, params=params)
    _check_sample(sample)
    reply_ids = sample.token_ids
    if reply_ids and reply_ids[-1] in params.stop_token_ids:
        reply_ids = reply_ids[:-1]
    reply = renderer.parse_reply(renderer.decode(reply_ids))
    turn = session.record(plan, sample, reply)
    return TurnResult(
        reply=reply, sampled_finish=turn.finish_reason,
        usage=Usage(len(plan.prompt_token_ids), len(sample.token_ids)), turn=turn,
    )
