"""A session's turn tree and its linearization into training rows (`Trace`s).

Each turn records its request (normalised messages + tools), the prompt token ids, the sampled
completion ids and logprobs, the finish reason and the assistant message it returned.

A new request is attached to the earlier turn P whose returned message equals the request's LAST
assistant message (role, content, tool calls with arguments compared as parsed JSON) and whose
own request equals the messages before it (and the same tools). Its prompt is then

    P.prompt_token_ids + P.completion_token_ids + encode(glue + suffix)

where the completion ids are the exact sampled tokens (never re-tokenised), `glue` is what the
template writes after the assistant's end-of-turn token ("\\n" after <|im_end|> in ChatML) and
`suffix` is render(messages, add_generation_prompt) minus render(messages[:k+1]). If the
re-rendered assistant text differs from the decoded sample (e.g. dropped <think>, reformatted
JSON) the turn counts a drift event, and the sampled ids are still used. Without such a P the
turn is a new root, rendered in full; a new root in a session that already has turns, or a second
child of one parent (an edited history), counts a fork.

    root (T0) ── T1 ── T2          leaf T2 -> Trace A: T0, T1, T2 sampled tokens trained
                  └─── T3          leaf T3 -> Trace B: T0, T1 mask 0 (trained in A), T3 mask 1
    root (T4)                      leaf T4 -> Trace C (a fork: a fresh conversation)

Linearization: one Trace per leaf, in turn order. token_ids = leaf prompt + leaf completion,
prompt_length = the root's prompt length; loss_mask is 1 exactly on the sampled tokens of the
chain's turns, 0 on template glue and tool results; logprobs are the sampled ones there and None
elsewhere. A turn shared by several leaves is trained (mask 1) only in the first leaf's trace and
keeps its logprobs with mask 0 in the others, so every sampled token is trained exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..records import FinishReason, SampleResult, Trace
from .rendering import Message, ParsedReply, Renderer, message_key, normalize_messages


@dataclass(frozen=True)
class PromptPlan:
    """The prompt for one request and where it attaches in the tree (before sampling)."""

    prompt_token_ids: tuple[int, ...]
    messages: tuple[Message, ...]
    tools_key: str
    parent: int | None
    drift: bool


@dataclass(frozen=True)
class Turn:
    index: int
    parent: int | None
    messages: tuple[Message, ...]
    tools_key: str
    prompt_token_ids: tuple[int, ...]
    completion_token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    policy_version: int
    reply: Message
    tool_calls: int
    ill_formed: bool
    drift: bool
    fork: bool


def _tools_key(tools: Sequence[Mapping[str, Any]] | None) -> str:
    return json.dumps(list(tools), sort_keys=True) if tools else ""


def _keys(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    return [message_key(m) for m in messages]


class TurnTree:
    """The turns of one session. Not thread-safe: the owning session serialises access."""

    def __init__(self, renderer: Renderer) -> None:
        self._renderer = renderer
        self._turns: list[Turn] = []

    @property
    def turns(self) -> tuple[Turn, ...]:
        return tuple(self._turns)

    def plan(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> PromptPlan:
        """Build the prompt ids for a request, reusing sampled tokens of a matching earlier turn."""
        normalised = tuple(normalize_messages(messages))
        tools_key = _tools_key(tools)
        last = next((i for i in range(len(normalised) - 1, -1, -1) if normalised[i]["role"] == "assistant"), None)
        parent = None if last is None else self._find_parent(normalised, last, tools_key)
        if parent is not None:
            extended = self._extend(parent, normalised, last, tools)
            if extended is not None:
                prompt, drift = extended
                return PromptPlan(prompt, normalised, tools_key, parent.index, drift)
        prompt = tuple(self._renderer.encode(self._renderer.render(normalised, tools=tools)))
        return PromptPlan(prompt, normalised, tools_key, None, False)

    def _find_parent(self, messages: tuple[Message, ...], last: int, tools_key: str) -> Turn | None:
        reply_key = message_key(messages[last])
        history = _keys(messages[:last])
        for turn in reversed(self._turns):
            if (turn.tools_key == tools_key and message_key(turn.reply) == reply_key
                    and _keys(turn.messages) == history):
                return turn
        return None

    def _extend(self, parent: Turn, messages: tuple[Message, ...], last: int,
                tools: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[int, ...], bool] | None:
        render = self._renderer.render
        head = render(messages[:last], tools=tools, add_generation_prompt=True)
        with_reply = render(messages[: last + 1], tools=tools, add_generation_prompt=False)
        full = render(messages, tools=tools, add_generation_prompt=True)
        if not (with_reply.startswith(head) and full.startswith(with_reply)):
            return None  # the template rewrites history here: no exact prefix to extend
        block = with_reply[len(head):]
        sampled = self._renderer.decode(parent.completion_token_ids)
        drift = not block.startswith(sampled)
        if drift:
            end = self._renderer.end_of_turn
            cut = block.rfind(end)
            glue = block[cut + len(end):] if cut >= 0 else ""
            if cut >= 0 and not sampled.endswith(end):
                glue = end + glue
        else:
            glue = block[len(sampled):]
        suffix = self._renderer.encode(glue + full[len(with_reply):])
        prompt = parent.prompt_token_ids + parent.completion_token_ids + tuple(suffix)
        return prompt, drift

    def record(self, plan: PromptPlan, sample: SampleResult, reply: ParsedReply) -> Turn:
        """Add the sampled turn for `plan` to the tree."""
        siblings = any(t.parent == plan.parent for t in self._turns) if plan.parent is not None else False
        fork = siblings or (plan.parent is None and bool(self._turns))
        finish = sample.finish_reason.value if isinstance(sample.finish_reason, FinishReason) else str(sample.finish_reason)
        turn = Turn(
            index=len(self._turns), parent=plan.parent, messages=plan.messages,
            tools_key=plan.tools_key, prompt_token_ids=plan.prompt_token_ids,
            completion_token_ids=tuple(sample.token_ids), logprobs=tuple(sample.logprobs),
            finish_reason=finish, policy_version=sample.policy_version,
            reply=reply.to_message(), tool_calls=len(reply.tool_calls),
            ill_formed=reply.ill_formed, drift=plan.drift, fork=fork,
        )
        self._turns.append(turn)
        return turn

    def traces(self) -> tuple[Trace, ...]:
        """One Trace per leaf; every sampled token is trained in exactly one of them."""
        parents = {t.parent for t in self._turns}
        trained: set[int] = set()
        traces = []
        for leaf in (t for t in self._turns if t.index not in parents):
            chain = [leaf]
            while chain[-1].parent is not None:
                chain.append(self._turns[chain[-1].parent])
            chain.reverse()
            traces.append(self._linearize(chain, trained))
        return tuple(traces)

    def _linearize(self, chain: list[Turn], trained: set[int]) -> Trace:
        leaf, prompt_length = chain[-1], len(chain[0].prompt_token_ids)
        token_ids = leaf.prompt_token_ids + leaf.completion_token_ids
        size = len(token_ids) - prompt_length
        loss_mask, logprobs = [0] * size, [None] * size
        for turn in chain:
            start = len(turn.prompt_token_ids) - prompt_length
            mask = 0 if turn.index in trained else 1
            trained.add(turn.index)
            for offset, logprob in enumerate(turn.logprobs):
                loss_mask[start + offset] = mask
                logprobs[start + offset] = logprob
        return Trace(
            token_ids=token_ids, prompt_length=prompt_length, loss_mask=tuple(loss_mask),
            logprobs=tuple(logprobs), finish_reason=leaf.finish_reason,
            metadata=chain_metadata(chain),
        )


def chain_metadata(turns: Sequence[Turn]) -> dict[str, Any]:
    """Counters over some turns (a trace's chain, or a whole session)."""
    return {
        "turns": len(turns),
        "forks": sum(t.fork for t in turns),
        "drift_events": sum(t.drift for t in turns),
        "tool_calls": sum(t.tool_calls for t in turns),
        "ill_formed": sum(t.ill_formed for t in turns),
        "truncated": sum(t.finish_reason == FinishReason.LENGTH.value for t in turns),
        "policy_versions": sorted({t.policy_version for t in turns}),
    }
