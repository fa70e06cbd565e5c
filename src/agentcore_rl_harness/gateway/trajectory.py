"""A session's turn tree and its linearization into training rows (`Trace`s).

Each turn records its request (normalised messages + tools), the prompt token ids, the sampled
completion ids and logprobs, the finish reason and the assistant message it returned.

Mounting. A new request is attached to the latest earlier turn P whose returned message equals
the request's LAST assistant message (role, content, tool calls with arguments compared as parsed
JSON; reasoning ignored) and whose own request equals the messages before it (and the same
tools). A request with no such P (first turn, a sub-agent with its own system prompt, an
unrelated conversation) is a new root: its own row. Its prompt depends on `history`:

  exact (default)   P.prompt_token_ids + P.completion_token_ids + encode(glue + suffix)
                    The sampled ids are reused verbatim (never re-tokenised), in a buffer the
                    chain shares (`tokens.TokenRun`: no per-turn copy of the history). `glue` is what the
                    template writes after the reply's end-of-turn token ("\n" after <|im_end|>),
                    `suffix` is render(messages) minus render(messages[:k+1]). Where the template
                    renders the reply differently from what was sampled (dropped <think>,
                    reformatted JSON) the turn counts a drift event and still uses the sampled ids.
                    A template that rewrites history so no suffix exists (even with reasoning
                    removed) makes the turn a new root: a fork + a drift event.
  template          encode(render(messages)): what the deployed template shows the model. If that
                    still starts with P's prompt + sampled ids the turn continues P's row; else
                    it is a new root (fork + drift) and P keeps its own row.

Cost per turn (exact). Only what is new in a request is normalised, rendered and tokenised, so a
turn costs the same at turn 200 as at turn 10 (`bench/gateway.py --scenario long`):
  - the parent is found by comparing the request's messages before its last assistant message
    with the parent's request as it arrived (one C-level equality), and only the messages from
    that assistant message on are normalised;
  - the suffix is rendered in a small window: the conversation's head (leading system messages
    and the first user message) + the reply + what follows it. The text after the sampled reply
    must come out the same in a second window that also holds the exchange before the reply; a
    template whose rendering of the new messages depends on more than that (or that does not
    reproduce the sampled reply) fails the check, and the turn takes the full render below.
  The full render remains the reference (`incremental=False` forces it); tests hold the two to the
  same token ids over long sessions for the bundled templates and the Qwen3/Llama-style ones.

Either way no sampled token is ever re-masked or dropped: it stays in P's chain. A second child
of one parent (an edited history) or a new root in a session that already has turns is a fork.

    root T0 ── T1 ── T2         leaf T2 -> Trace A: T0, T1, T2 sampled tokens trained
                 └─── T3        leaf T3 -> Trace B: T0, T1 mask 0 (trained in A), T3 mask 1
    root T4                     leaf T4 -> Trace C: a sub-agent, or a drift fork in `template`

Linearization: one Trace per leaf, in turn order. token_ids = leaf prompt + leaf completion,
prompt_length = the root's prompt length; loss_mask is 1 exactly on the sampled tokens of the
chain's turns, 0 on template glue and tool results; logprobs are the sampled ones there and None
elsewhere. A turn shared by several leaves is trained (mask 1) only in the first leaf's trace and
keeps its logprobs with mask 0 in the others, so every sampled token is trained exactly once.
Linearization is O(total tokens): each trace is built from its chain in one pass.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from itertools import chain as _chain, repeat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import RenderError
from ..records import FinishReason, HistoryMode, SampleResult, Trace
from .rendering import Message, ParsedReply, Renderer, message_key, normalize_message, normalize_messages
from .tokens import TokenRun, first


@dataclass(frozen=True)
class PromptPlan:
    """The prompt for one request and where it attaches in the tree (before sampling).
    `history_keys` and `request` (the messages as they arrived) are kept for matching later
    requests; empty means "compute them from `messages`" and "not kept". Like the prompt ids,
    `messages` and `history_keys` of a turn that extends another are views of a buffer the chain
    shares (`TokenRun`): a session holds its history once, not once per turn."""

    prompt_token_ids: Sequence[int]
    messages: Sequence[Message]
    tools_key: str
    parent: int | None
    drift: bool
    history_keys: Sequence[tuple[Any, ...]] = ()
    request: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class Turn:
    index: int
    parent: int | None
    messages: Sequence[Message]
    tools_key: str
    prompt_token_ids: Sequence[int]
    completion_token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    policy_version: int
    reply: Message
    tool_calls: int
    ill_formed: bool
    drift: bool
    fork: bool
    history_keys: Sequence[tuple[Any, ...]] = ()
    reply_key: tuple[Any, ...] = ()
    completion_text: str | None = None


def _tools_key(tools: Sequence[Mapping[str, Any]] | None) -> str:
    return json.dumps(list(tools), sort_keys=True) if tools else ""


def _keys(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    return [message_key(m) for m in messages]



# Renders a tree keeps (text by messages, tools and generation prompt): a turn's prompt render is
# the next turn's render of the history before its reply, so each extending turn renders twice
# instead of three times. A few entries cover concurrent requests on one session.
RENDER_CACHE_SIZE = 8
# Requests kept as they arrived (the latest turns'), for the one-comparison parent match.
REQUESTS_KEPT = 4
# Shorter histories (messages between the head and the reply) take the full render: as cheap.
WINDOW_MIN_MESSAGES = 3


def _render_key(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None,
                add_generation_prompt: bool) -> bytes | None:
    """An exact key of what the template sees (dict order kept), or None when not JSON."""
    try:
        return orjson.dumps([messages, tools or None, add_generation_prompt])
    except (TypeError, orjson.JSONEncodeError):
        return None


def _extended(parent: Turn, suffix: Sequence[int]) -> TokenRun:
    """The parent's prompt + its sampled ids + `suffix`, sharing the chain's buffer (`tokens.py`)."""
    return TokenRun.of(parent.prompt_token_ids).extended(parent.completion_token_ids, suffix)


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else None


def _head_length(messages: Sequence[Message], last: int) -> int:
    """How many messages open the conversation: the leading system messages and the first user
    message (templates render these specially: the system prompt, Llama's tools in the first
    user turn). 0 when that head reaches the reply."""
    head = 0
    while head < last and messages[head]["role"] == "system":
        head += 1
    if head < last and messages[head]["role"] == "user":
        head += 1
    return head if head < last else 0


def _without_reasoning(messages: Sequence[Message]) -> tuple[Message, ...]:
    return tuple({k: v for k, v in m.items() if k != "reasoning_content"} for m in messages)


class TurnTree:
    """The turns of one session. Not thread-safe: the owning session serialises access.

    `history` is "exact" (prompts reuse the sampled ids) or "template" (prompts are the
    template's rendering; a turn whose rendering no longer contains its parent's sampled ids
    starts a new row).
    """

    def __init__(self, renderer: Renderer, *, history: str = "exact", incremental: bool = True) -> None:
        self._renderer = renderer
        self.history = HistoryMode.parse(history, key="history").value
        self.incremental = incremental
        self._turns: list[Turn] = []
        self._with_children: set[int] = set()
        self._requests: OrderedDict[int, Sequence[Mapping[str, Any]]] = OrderedDict()
        self._renders: OrderedDict[bytes, str] = OrderedDict()

    def _render(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None,
                add_generation_prompt: bool = True) -> str:
        """`renderer.render`, remembered for the last few distinct inputs of this tree."""
        if isinstance(messages, TokenRun):
            messages = tuple(messages)
        key = _render_key(messages, tools, add_generation_prompt)
        if key is not None and key in self._renders:
            self._renders.move_to_end(key)
            return self._renders[key]
        text = self._renderer.render_normalized(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        if key is not None:
            self._renders[key] = text
            if len(self._renders) > RENDER_CACHE_SIZE:
                self._renders.popitem(last=False)
        return text

    @property
    def turns(self) -> tuple[Turn, ...]:
        return tuple(self._turns)

    def plan(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> PromptPlan:
        """Build the prompt ids for a request, reusing sampled tokens of a matching earlier turn."""
        tools_key = _tools_key(tools)
        request = messages if isinstance(messages, TokenRun) else tuple(messages)  # a run: a view, kept as is
        last = next((i for i in range(len(request) - 1, -1, -1) if _role(request[i]) == "assistant"), None)
        parent, earlier = (None, ()) if last is None or not self.incremental else \
            self._same_request(request, last, tools_key)
        if parent is not None:  # only the messages from the reply on are new
            if not isinstance(request, TokenRun):  # a run holds the wire's known objects already
                request = (*earlier, *request[last:])  # one kept copy of the history: the earlier one
            new = normalize_messages(request[last:])
            normalised = TokenRun.of(parent.messages).extended(new)  # the chain's buffer, no copy
            keys = TokenRun.of(parent.history_keys).extended(_keys(new))
        else:
            normalised = tuple(normalize_messages(request))
            keys = tuple(_keys(normalised))
            parent = None if last is None else self._find_parent(keys, last, tools_key)
        plan = functools.partial(PromptPlan, messages=normalised, tools_key=tools_key, history_keys=keys,
                                 request=request)
        if parent is not None and self.history == "template":
            prompt = TokenRun.of(self._renderer.encode(self._render(normalised, tools)))
            sampled = parent.prompt_token_ids + parent.completion_token_ids
            if prompt[:len(sampled)] == sampled:
                return plan(prompt, parent=parent.index, drift=False)
            return plan(prompt, parent=None, drift=True)
        if parent is not None:
            extended = self._extend_in_window(parent, normalised, last, tools) if self.incremental else None
            extended = extended or self._extend(parent, normalised, last, tools)
            if extended is not None:
                prompt, drift = extended
                return plan(prompt, parent=parent.index, drift=drift)
        prompt = TokenRun.of(self._renderer.encode(self._render(normalised, tools)))
        return plan(prompt, parent=None, drift=parent is not None)

    def _same_request(self, request: Sequence[Mapping[str, Any]], last: int,
                      tools_key: str) -> tuple[Turn | None, Sequence[Mapping[str, Any]]]:
        """A recent turn whose request, as it arrived, is `request[:last]` and whose reply is
        `request[last]`, and that request; or (None, ()) (then `_find_parent` compares
        normalised keys). One C-level comparison, fastest when the wire handed the messages it
        already knows over as the same objects (`known_history.py`); none at all when both are
        runs of one buffer (`tokens.TokenRun`: the wire extended the earlier request's run)."""
        reply_key = None
        for index, earlier in reversed(self._requests.items()):
            turn = self._turns[index]
            if len(earlier) == last and turn.tools_key == tools_key and earlier == first(request, last):
                reply_key = reply_key or message_key(normalize_message(request[last]))
                if turn.reply_key == reply_key:
                    return turn, earlier
        return None, ()

    def _find_parent(self, keys: tuple[tuple[Any, ...], ...], last: int, tools_key: str) -> Turn | None:
        reply_key, history = keys[last], keys[:last]
        for turn in reversed(self._turns):
            if (turn.tools_key == tools_key and turn.reply_key == reply_key
                    and len(turn.history_keys) == last and turn.history_keys == history):
                return turn
        return None

    def _extend_in_window(self, parent: Turn, messages: tuple[Message, ...], last: int,
                          tools: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[int, ...], bool] | None:
        """`_extend`'s common case rendered in two small windows (see the module docstring), or
        None when the windows disagree or the template does not reproduce the sampled reply."""
        head = _head_length(messages, last)
        if head == 0 or last - head < WINDOW_MIN_MESSAGES:
            return None
        before = next((i for i in range(last - 1, head - 1, -1) if messages[i]["role"] == "assistant"), None)
        if before is None:
            return None
        sampled, context, new = self._completion_text(parent), messages[:head], messages[last:]
        try:
            rest = self._text_after(context, new, sampled, tools)
            if rest is None or rest != self._text_after(context + messages[before:last], new, sampled, tools):
                return None
        except RenderError:
            return None
        suffix = self._renderer.encode(rest)
        return _extended(parent, suffix), False

    def _text_after(self, head: tuple[Message, ...], new: tuple[Message, ...], sampled: str,
                    tools: Sequence[Mapping[str, Any]] | None) -> str | None:
        """In render(head + new), the text after `new[0]` (the reply) when the reply renders as
        `sampled` right after render(head) with its generation prompt; else None."""
        before = self._render(head, tools, True)
        full = self._render(head + new, tools, True)
        if full.startswith(before) and full.startswith(sampled, len(before)):
            return full[len(before) + len(sampled):]
        return None

    def _extend(self, parent: Turn, messages: tuple[Message, ...], last: int,
                tools: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[int, ...], bool] | None:
        """parent prompt + sampled ids + the template's text after the reply, or None when the
        template offers no such suffix. Tried as sent, then with reasoning removed (templates
        that drop earlier `<think>` blocks render the reply differently once a turn follows).

        The common case costs one render: when the template's text for the whole request is the
        parent's prompt text followed by exactly the sampled text, the rest is the suffix."""
        render = self._render
        sampled = self._completion_text(parent)
        head = render(messages[:last], tools, True)  # the parent's prompt render: cached
        full = render(messages, tools, True)
        if full.startswith(head) and full.startswith(sampled, len(head)):
            suffix = self._renderer.encode(full[len(head) + len(sampled):])
            return _extended(parent, suffix), False
        for variant in (messages, _without_reasoning(messages)):
            head = render(variant[:last], tools, True)
            with_reply = render(variant[: last + 1], tools, False)
            full = render(variant, tools, True)
            if with_reply.startswith(head) and full.startswith(with_reply):
                break
        else:
            return None
        block = with_reply[len(head):]
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
        prompt = _extended(parent, suffix)
        return prompt, drift

    def _completion_text(self, turn: Turn) -> str:
        if turn.completion_text is None:
            return self._renderer.decode(turn.completion_token_ids)
        return turn.completion_text

    def record(self, plan: PromptPlan, sample: SampleResult, reply: ParsedReply, *,
               completion_text: str | None = None) -> Turn:
        """Add the sampled turn for `plan` to the tree. `completion_text`, when the caller has it,
        is `renderer.decode(sample.token_ids)` (saves decoding it again when a turn follows)."""
        siblings = plan.parent in self._with_children
        fork = siblings or (plan.parent is None and bool(self._turns))
        finish = sample.finish_reason.value if isinstance(sample.finish_reason, FinishReason) else str(sample.finish_reason)
        turn = Turn(
            index=len(self._turns), parent=plan.parent, messages=plan.messages,
            tools_key=plan.tools_key, prompt_token_ids=TokenRun.of(plan.prompt_token_ids),
            completion_token_ids=tuple(sample.token_ids), logprobs=tuple(sample.logprobs),
            finish_reason=finish, policy_version=sample.policy_version,
            reply=reply.to_message(), tool_calls=len(reply.tool_calls),
            ill_formed=reply.ill_formed, drift=plan.drift, fork=fork,
            history_keys=plan.history_keys or tuple(_keys(plan.messages)),
            reply_key=message_key(reply.to_message()), completion_text=completion_text,
        )
        self._turns.append(turn)
        if plan.parent is not None:
            self._with_children.add(plan.parent)
        if plan.request:
            self._requests[turn.index] = plan.request
            if len(self._requests) > REQUESTS_KEPT:
                self._requests.popitem(last=False)
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
        token_ids = (*leaf.prompt_token_ids, *leaf.completion_token_ids)
        masks, logprobs, position = [], [], prompt_length  # runs, joined once (one pass, no copies)
        for turn in chain:
            gap, sampled = len(turn.prompt_token_ids) - position, len(turn.logprobs)
            masks += (repeat(0, gap), repeat(0 if turn.index in trained else 1, sampled))
            logprobs += (repeat(None, gap), turn.logprobs)
            trained.add(turn.index)
            position += gap + sampled
        return Trace(
            token_ids=token_ids, prompt_length=prompt_length, loss_mask=tuple(chain_runs(masks)),
            logprobs=tuple(chain_runs(logprobs)), finish_reason=leaf.finish_reason,
            metadata=chain_metadata(chain),
        )


chain_runs = _chain.from_iterable


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
