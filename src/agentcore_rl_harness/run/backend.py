"""The run's training/sampling backend as a task test sees it: the `backend` fixture.

A plain object over what the harness already holds: the sampler the gateway samples with (for a
managed trainer, the service's own sampler, so the policy is the one being trained) and the
renderer of the policy's chat template. For reward models and sanity checks: draw a sample of a
prompt, or score a completion, without an agent session. `asample` / `ascore` are the methods;
`sample` / `score` are the sync bridge over the harness's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..records import FinishReason, SamplingParams

if TYPE_CHECKING:
    from ..gateway.rendering import Renderer
    from ..gateway.sampling import SamplingBackend

T = TypeVar("T")
# Chat messages ({"role": ..., "content": ...}), rendered with the policy's template and its
# generation prompt, or prompt token ids as they are.
Prompt = Sequence[Mapping[str, Any]] | Sequence[int]


class EventLoopThread(Protocol):
    """The harness's loop thread (`run.loop.LoopThread`): where sampling runs."""

    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T: ...


@dataclass(frozen=True)
class Completion:
    """One sample of `backend.sample`: the policy's tokens, their logprobs and its text."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # a final stop token is included, as in traces
    logprobs: tuple[float, ...]  # one per token, under softmax(logits / temperature)
    finish_reason: str
    policy_version: int
    text: str  # the tokens decoded, without the final stop token


@dataclass(frozen=True)
class Score:
    """The policy's logprobs of `token_ids` following `prompt_token_ids` (`backend.score`)."""

    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]

    @property
    def total(self) -> float:
        """log p(completion | prompt): the sum of the token logprobs."""
        return sum(self.logprobs)


class Backend:
    """Policy version, model name, and direct sampling and scoring through the run's sampler."""

    def __init__(
        self, *, sampler: SamplingBackend, renderer: Renderer, loop: EventLoopThread,
        model_name: str, sampling: SamplingParams,
    ) -> None:
        self.model_name = model_name
        self.sampling = sampling  # the run's sampling params (`sampling.*`): the default of sample()
        self.renderer = renderer
        self._sampler = sampler
        self._loop = loop

    def __repr__(self) -> str:
        return f"<backend {self.model_name} policy_version={self.policy_version} {type(self._sampler).__name__}>"

    @property
    def policy_version(self) -> int | None:
        """The version of the weights new samples are drawn from (None: the sampler keeps none)."""
        version = self._sampler.policy_version
        return None if version is None else int(version)

    def prompt_token_ids(self, prompt: Prompt, *, tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """The token ids `prompt` is sampled from (messages rendered with the generation prompt)."""
        items = list(prompt)
        if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            if tools:
                raise ValueError("backend: tools are rendered with messages; a token-id prompt has them already")
            return items
        if items and all(isinstance(m, Mapping) for m in items):
            return self.renderer.encode(self.renderer.render(items, tools=tools))
        raise TypeError(
            "backend: a prompt is a non-empty list of chat messages ({'role': 'user', 'content': "
            f"...}}) or of token ids, got {_describe(prompt)}"
        )

    async def asample(
        self, prompt: Prompt, *, params: SamplingParams | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        """Sample one completion of `prompt` (default params: the run's `sampling.*`; the chat
        template's end-of-turn tokens always stop it)."""
        prompt_ids = self.prompt_token_ids(prompt, tools=tools)
        chosen = params or self.sampling
        stops = tuple(dict.fromkeys((*self.renderer.stop_token_ids, *chosen.stop_token_ids)))
        result = await self._sampler.sample(
            prompt_token_ids=prompt_ids, params=dataclasses.replace(chosen, stop_token_ids=stops)
        )
        token_ids = tuple(result.token_ids)
        shown = token_ids[:-1] if token_ids and token_ids[-1] in stops else token_ids
        return Completion(
            prompt_token_ids=tuple(prompt_ids), token_ids=token_ids, logprobs=tuple(result.logprobs),
            finish_reason=FinishReason(result.finish_reason).value,
            policy_version=result.policy_version, text=self.renderer.decode(shown),
        )

    def sample(
        self, prompt: Prompt, *, params: SamplingParams | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        """`asample` for sync callers (in an `async def` test or reward, await `asample`)."""
        return self._bridge("sample", self.asample(prompt, params=params, tools=tools))

    async def ascore(
        self, prompt: Prompt, completion: str | Sequence[int], *, temperature: float = 1.0,
    ) -> Score:
        """The policy's logprob of each token of `completion` (text is encoded without special
        tokens) after `prompt`, under softmax(logits / temperature)."""
        prompt_ids = self.prompt_token_ids(prompt)
        if isinstance(completion, str):
            completion_ids = self.renderer.encode(completion)
        else:
            completion_ids = [int(t) for t in completion]
        logprobs = await self._sampler.score(  # one that cannot score says so (SamplingError)
            prompt_token_ids=prompt_ids, completion_token_ids=completion_ids, temperature=temperature
        )
        return Score(prompt_token_ids=tuple(prompt_ids), token_ids=tuple(completion_ids), logprobs=tuple(logprobs))

    def score(self, prompt: Prompt, completion: str | Sequence[int], *, temperature: float = 1.0) -> Score:
        """`ascore` for sync callers (in an `async def` test or reward, await `ascore`)."""
        return self._bridge("score", self.ascore(prompt, completion, temperature=temperature))

    def _bridge(self, name: str, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.block_on(coro, refusal=(
            f"backend.{name}() blocks, and was called on the harness's event loop (from an "
            f"async def test or reward); there, use `await backend.a{name}(...)`"))


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
