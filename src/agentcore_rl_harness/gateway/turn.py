"""One chat turn: render -> sample -> parse -> record, under the session's sampling policy.

A turn has two steps so that a streaming route can answer errors with a proper status before it
sends any byte: `prepare_turn` (plan the prompt, apply the policy, take a turn slot; raises) and
`sample_turn` (sample, parse, record). `run_turn` does both.

Sampling policy. The session's sampling wins over what the agent asks for: the agent may only
lower `max_tokens`. Every other attempted change (temperature, top_p, top_k, seed, stop, a higher
max_tokens) is ignored and counted in the session metadata, so a trainer sees the policy it
configured.

Context budget. A session's `context_budget_tokens` bounds prompt + reply of every turn (the
length of the trace row the turn extends). When the prompt leaves less room than `max_tokens`,
`max_tokens` is lowered to what remains; when it leaves none, the turn ends at once with
finish reason `length` and an empty reply, nothing is sampled or recorded, and the session counts
`context_budget_exhausted`. Either way the session's `limits_hit` names `context_budget_tokens`.

Context window. A prompt that leaves no room in the model's context window (`context_window`,
when the gateway knows it) is refused with `ContextLengthError` (HTTP 400, code
`context_length_exceeded`, counted as the session event of that name so a runner can tell the
agent's overflow from a gateway failure); otherwise `max_tokens` is lowered to the room left.

Recording. A turn is recorded only when its sample is complete. A sample is never cancelled
because the client went away (see `streaming.py`): sampled tokens are always recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import HarnessError, SamplingError
from ..records import SampleResult, SamplingParams, Usage
from .forcing import forced_sample
from .passthrough import ChatBackend
from .rendering import ParsedReply, Renderer
from .sampling import SamplingBackend, TokenCallback, routing_key
from .sessions import Session, TurnStart
from .tokens import TokenRun
from .trajectory import PromptPlan, Turn


class ContextLengthError(HarnessError):
    """The prompt fills the model's context window: the agent's request is too long (HTTP 400)."""

    code = "context_length_exceeded"

    def __init__(self, *, prompt_tokens: int, context_window: int) -> None:
        super().__init__(
            f"prompt is too long: {prompt_tokens} tokens > {context_window - 1} maximum. This model's "
            f"maximum context length is {context_window} tokens, and the messages resulted in "
            f"{prompt_tokens} tokens, leaving no room for a reply; shorten or summarise the history")
        self.prompt_tokens, self.context_window = prompt_tokens, context_window


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
class PreparedTurn:
    """A planned turn holding one of the session's turn slots until `sample_turn` ends."""

    session: Session
    plan: PromptPlan
    params: SamplingParams
    tools: tuple[Mapping[str, Any], ...] | None
    exhausted: bool
    messages: Sequence[Mapping[str, Any]] = ()  # the request's internal messages, ids kept (`passthrough.py`)

    @property
    def prompt_tokens(self) -> int:
        return len(self.plan.prompt_token_ids)


@dataclass(frozen=True)
class TurnResult:
    reply: ParsedReply
    sampled_finish: str
    usage: Usage
    turn: Turn | None


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


def prepare_turn(
    *, session: Session, renderer: Renderer, messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None, requested: RequestedSampling,
    context_window: int | None = None,
) -> PreparedTurn:
    """Plan the prompt and the params; raises before anything is sampled (turn cap, render,
    context window). The session hears of the turn twice: the plan, then one `TurnStart` (the
    slot taken, overrides, limits and events counted under one lock)."""
    plan = session.plan(messages, tools)
    params, overrides = effective_sampling(session.sampling, requested, renderer.stop_token_ids)
    if context_window is not None:
        room = context_window - len(plan.prompt_token_ids)
        if room < 1:
            session.count_event(ContextLengthError.code)
            raise ContextLengthError(prompt_tokens=len(plan.prompt_token_ids), context_window=context_window)
        if room < params.max_tokens:
            params = dataclasses.replace(params, max_tokens=room)
    task_left = session.budget.tokens_left()
    if task_left is not None and 0 < task_left < params.max_tokens:  # 0: start_turn refuses the turn
        params = dataclasses.replace(params, max_tokens=task_left)
    budget = session.limits.context_budget_tokens
    exhausted = clamped = False
    if budget is not None:
        remaining = budget - len(plan.prompt_token_ids)
        exhausted = remaining <= 0
        clamped = not exhausted and remaining < params.max_tokens
        if clamped:
            params = dataclasses.replace(params, max_tokens=remaining)
    session.start_turn(TurnStart(overrides=tuple(overrides),
                                 limits_hit=("context_budget_tokens",) if exhausted or clamped else (),
                                 events=("context_budget_exhausted",) if exhausted else ()))
    return PreparedTurn(session=session, plan=plan, params=params,
                        tools=tuple(tools) if tools else None, exhausted=exhausted,
                        messages=messages if isinstance(messages, TokenRun) else tuple(messages))


def _check_sample(sample: SampleResult) -> None:
    if len(sample.logprobs) != len(sample.token_ids):
        raise SamplingError(
            f"the sampler returned {len(sample.token_ids)} tokens but {len(sample.logprobs)} "
            "logprobs; a sampler must return one logprob per sampled token"
        )


def _decoded(token_ids: Sequence[int], stop_token_ids: Sequence[int], renderer: Renderer) -> tuple[str, str]:
    """(text of all sampled ids, text of the reply without its final stop token), decoding once
    when the stop is the template's end-of-turn token."""
    completion_text = renderer.decode(token_ids)
    if not token_ids or token_ids[-1] not in stop_token_ids:
        return completion_text, completion_text
    end = renderer.end_of_turn
    if token_ids[-1] == renderer.stop_token_ids[0] and end and completion_text.endswith(end):
        return completion_text, completion_text[:-len(end)]
    return completion_text, renderer.decode(token_ids[:-1])


async def sample_turn(
    prepared: PreparedTurn, *, sampler: SamplingBackend, renderer: Renderer,
    on_token: TokenCallback | None = None, chat: ChatBackend | None = None,
) -> TurnResult:
    """Sample the prepared turn, parse the reply and record it; always releases the turn slot.
    With `chat` (a hosted baseline, `passthrough.py`) the messages go to it and nothing is recorded."""
    session, plan, params = prepared.session, prepared.plan, prepared.params
    try:
        if prepared.exhausted:
            return TurnResult(reply=ParsedReply(content=""), sampled_finish="length",
                              usage=Usage(len(plan.prompt_token_ids), 0), turn=None)
        if chat is not None:
            with routing_key(session.session_id):
                answer = await chat.reply(messages=prepared.messages, tools=prepared.tools, params=params)
            session.record_passthrough(answer.usage)
            return TurnResult(reply=answer.reply, sampled_finish=answer.finish_reason, usage=answer.usage, turn=None)
        if session.script is not None:
            sample = await _forced(prepared, sampler=sampler, renderer=renderer, on_token=on_token)
        else:
            extra = {} if on_token is None else {"on_token": on_token}
            with routing_key(session.session_id):
                sample = await sampler.sample(prompt_token_ids=plan.prompt_token_ids, params=params, **extra)
        _check_sample(sample)
        completion_text, reply_text = _decoded(sample.token_ids, params.stop_token_ids, renderer)
        reply = renderer.parse_reply(reply_text, tools=prepared.tools)
        turn = session.record(plan, sample, reply, completion_text=completion_text)
    finally:
        session.end_turn()
    return TurnResult(reply=reply, sampled_finish=turn.finish_reason,
                      usage=Usage(len(plan.prompt_token_ids), len(sample.token_ids)), turn=turn)


async def _forced(prepared: PreparedTurn, *, sampler: SamplingBackend, renderer: Renderer,
                  on_token: TokenCallback | None) -> SampleResult:
    """A teacher-forced session's next scripted turn as the sample (`forcing.py`)."""
    session = prepared.session
    index, reply = session.next_scripted()
    with routing_key(session.session_id):
        sample, source = await forced_sample(
            sampler=sampler, renderer=renderer, prompt_token_ids=prepared.plan.prompt_token_ids,
            messages=prepared.plan.messages, reply=reply, index=index, tools=prepared.tools,
            params=prepared.params, score=session.score_forced)
    session.forced_logprobs = source
    if on_token is not None:
        for token_id, logprob in zip(sample.token_ids, sample.logprobs):
            on_token(token_id, logprob)
    return sample


async def run_turn(
    *, session: Session, sampler: SamplingBackend, renderer: Renderer,
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
    requested: RequestedSampling,
) -> TurnResult:
    """Sample one assistant reply for `messages` and record it in the session's tree."""
    prepared = prepare_turn(session=session, renderer=renderer, messages=messages, tools=tools,
                            requested=requested)
    return await sample_turn(prepared, sampler=sampler, renderer=renderer)
