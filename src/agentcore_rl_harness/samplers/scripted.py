"""`ScriptedSampler`: the in-package fake for the `SamplingBackend` seam (like httpx's MockTransport).

Replies come from a list (served in order) or a callable `(prompt_token_ids, params) -> reply`.
A reply is a sequence of token ids, or a text when an `encode` callable is given. The sampler then
behaves like a model that produced exactly that reply: it cuts after the first token in
`params.stop_token_ids` (finish "stop", the stop token kept), truncates at `params.max_tokens`
(finish "length"), and a reply that runs out first is ended with the request's first stop token,
as a real model would end it (finish "stop"; with no stop ids the reply is returned as is).
Logprobs are deterministic: a fixed value, or `logprob(position, token_id)`. An `on_token`
callback receives every token of the reply, in order, before `sample` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

from ..errors import SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import FinishReason, SampleResult, SamplingParams

Reply = Union[str, Sequence[int]]
ReplyFunction = Callable[[tuple[int, ...], SamplingParams], Reply]


@dataclass(frozen=True)
class ScriptedCall:
    """One recorded `sample` call."""

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams


class ScriptedSampler(SamplingBackend):
    """A deterministic `SamplingBackend` for tests; `calls` records every request."""

    def __init__(
        self,
        replies: Sequence[Reply] | ReplyFunction,
        *,
        encode: Callable[[str], Sequence[int]] | None = None,
        logprob: float | Callable[[int, int], float] = -1.0,
        policy_version: int = 0,
    ) -> None:
        if not callable(replies):
            replies = list(replies)
            if encode is None and any(isinstance(reply, str) for reply in replies):
                raise ValueError("text replies need an encode callable (e.g. tokenizer.encode)")
        self._replies = replies
        self._next = 0
        self._encode = encode
        self._logprob = logprob
        self.policy_version = policy_version
        self.calls: list[ScriptedCall] = []

    async def sample(
        self,
        *,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> SampleResult:
        prompt = tuple(int(token) for token in prompt_token_ids)
        self.calls.append(ScriptedCall(prompt, params))
        token_ids, finish_reason = self._shape(self._token_ids(self._reply(prompt, params)), params)
        logprobs = tuple(self._logprob_at(i, token) for i, token in enumerate(token_ids))
        if on_token is not None:
            for token_id, logprob in zip(token_ids, logprobs):
                on_token(token_id, logprob)
        return SampleResult(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish_reason,
            policy_version=self.policy_version,
        )

    def close(self) -> None:
        """Nothing to release; present so tests can treat it like any sampler."""

    def _reply(self, prompt: tuple[int, ...], params: SamplingParams) -> Reply:
        if callable(self._replies):
            return self._replies(prompt, params)
        if self._next >= len(self._replies):
            raise SamplingError(
                f"ScriptedSampler ran out of replies: {len(self._replies)} scripted, "
                f"call {self._next + 1} made; script more replies or pass a callable"
            )
        reply = self._replies[self._next]
        self._next += 1
        return reply

    def _token_ids(self, reply: Reply) -> list[int]:
        if isinstance(reply, str):
            if self._encode is None:
                raise SamplingError("the scripted reply is text but no encode callable was given")
            return [int(token) for token in self._encode(reply)]
        return [int(token) for token in reply]

    @staticmethod
    def _shape(token_ids: list[int], params: SamplingParams) -> tuple[tuple[int, ...], FinishReason]:
        stop_ids = set(params.stop_token_ids)
        cut = next((i + 1 for i, token in enumerate(token_ids) if token in stop_ids), None)
        if cut is None and params.stop_token_ids:
            token_ids = [*token_ids, params.stop_token_ids[0]]
            cut = len(token_ids)
        if cut is None:
            cut = len(token_ids)
        if cut > params.max_tokens:
            return tuple(token_ids[: params.max_tokens]), FinishReason.LENGTH
        return tuple(token_ids[:cut]), FinishReason.STOP

    def _logprob_at(self, position: int, token_id: int) -> float:
        if callable(self._logprob):
            return float(self._logprob(position, token_id))
        return float(self._logprob)
