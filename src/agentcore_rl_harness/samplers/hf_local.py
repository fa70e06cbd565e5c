"""`HFLocalSampler`: an in-process transformers `SamplingBackend` that batches concurrent calls.

One worker thread owns the model. Concurrent `sample` calls queue up; the worker takes every
waiting request (up to `max_batch_size`, waiting `batch_wait_s` for more) and decodes them together
with left padding, an attention mask, explicit position ids and the model's KV cache.

Logprob contract: `logprobs[i] = log_softmax(logits / T)[token_ids[i]]` in fp32, with T the
request's temperature, taken BEFORE top-k / top-p truncation (truncation only restricts which
tokens can be drawn). T == 0 means greedy argmax, and its logprob is taken at T = 1. A token in
`stop_token_ids` ends the sample, is included in `token_ids` with its logprob, and gives finish
reason "stop"; reaching `max_tokens` gives "length". No stop ids are added implicitly (not even
EOS): the caller passes them.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MissingDependencyError, SamplingError
from ..records import FinishReason, SampleResult, SamplingParams

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without the [local] extra
    raise MissingDependencyError(
        f"the hf_local sampler needs torch ({exc}); pip install 'agentcore-rl-harness[local]'"
    ) from exc

_STOP = object()


@dataclass
class _Request:
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class _Row:
    """Decoding state of one request inside a batch."""

    def __init__(self, request: _Request, device: Any) -> None:
        self.request = request
        self.params = request.params
        self.stop_ids = frozenset(request.params.stop_token_ids)
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish_reason: FinishReason | None = None
        self.generator = None
        if request.params.seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(request.params.seed)

    def add(self, token_id: int, logprob: float) -> None:
        self.token_ids.append(token_id)
        self.logprobs.append(logprob)
        if token_id in self.stop_ids:
            self.finish_reason = FinishReason.STOP
        elif len(self.token_ids) >= self.params.max_tokens:
            self.finish_reason = FinishReason.LENGTH


def _validate(params: SamplingParams) -> None:
    if params.max_tokens < 1:
        raise SamplingError(f"max_tokens must be at least 1, got {params.max_tokens}")
    if params.temperature < 0:
        raise SamplingError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise SamplingError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise SamplingError(f"top_k must be >= 0 (0 means off), got {params.top_k}")


def _draw(logprobs: torch.Tensor, params: SamplingParams, generator: Any) -> int:
    """Draw one token from a row of tempered logprobs, applying top-k / top-p as a restriction."""
    scores = logprobs
    if params.top_k and params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        outside = torch.cumsum(probs, dim=-1) - probs >= params.top_p
        outside[0] = False
        scores = scores.masked_fill(torch.zeros_like(outside).scatter(0, order, outside), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


class HFLocalSampler:
    """Token-in/token-out sampling from an in-process transformers causal LM.

    `model` may be replaced between batches: hold `lock` while changing the weights (or call
    `swap_model`), then `set_policy_version`. `batches_run` and `forward_calls` count work done.
    """

    def __init__(
        self,
        model: Any,
        *,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        policy_version: int = 0,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.policy_version = policy_version
        self.lock = threading.RLock()
        self.batches_run = 0
        self.forward_calls = 0
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="hf-local-sampler", daemon=True)
        self._worker.start()

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], dtype: str = "float32", **kwargs: Any) -> "HFLocalSampler":
        """Load a named model or a local HF folder (see `models.resolve_model`)."""
        from ..models import load_model, resolve_model

        return cls(load_model(resolve_model(path), dtype=dtype), **kwargs)

    def set_policy_version(self, version: int) -> None:
        with self.lock:
            self.policy_version = version

    def swap_model(self, model: Any, *, policy_version: int) -> None:
        """Replace the model between batches (a batch in flight finishes on the old one)."""
        with self.lock:
            self.model = model
            self.policy_version = policy_version

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams) -> SampleResult:
        if self._closed:
            raise SamplingError("the HF local sampler is closed")
        prompt = tuple(int(token) for token in prompt_token_ids)
        if not prompt:
            raise SamplingError("prompt_token_ids is empty; the model needs at least one token")
        _validate(params)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and len(prompt) + params.max_tokens > limit:
            raise SamplingError(
                f"prompt of {len(prompt)} tokens plus max_tokens {params.max_tokens} exceeds the "
                f"model's {limit} positions; shorten the prompt or lower max_tokens to at most "
                f"{max(limit - len(prompt), 0)}"
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Request(prompt, params, loop, future))
        return await future

    def close(self) -> None:
        """Stop the worker after the requests already queued are served."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._worker.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stop = self._collect(first)
            try:
                with self.lock:
                    results = self._decode(batch)
            except Exception as exc:
                for request in batch:
                    error = SamplingError(
                        f"HF local sampler failed on a batch of {len(batch)} requests: "
                        f"{type(exc).__name__}: {exc}"
                    )
                    error.__cause__ = exc
                    _deliver(request, error=error)
            else:
                for request, result in zip(batch, results):
                    _deliver(request, result=result)
            if stop:
                return

    def _collect(self, first: _Request) -> tuple[list[_Request], bool]:
        batch = [first]
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
        return batch, False

    @torch.inference_mode()
    def _decode(self, batch: list[_Request]) -> list[SampleResult]:
        model = self.model
        version = self.policy_version
        device = getattr(model, "device", torch.device("cpu"))
        rows = [_Row(request, device) for request in batch]
        width = max(len(request.prompt_token_ids) for request in batch)
        input_ids = torch.zeros((len(batch), width), dtype=torch.long, device=device)
        attention_mask = torch.zeros_like(input_ids)
        for index, request in enumerate(batch):
            prompt = torch.tensor(request.prompt_token_ids, dtype=torch.long, device=device)
            input_ids[index, width - prompt.numel():] = prompt
            attention_mask[index, width - prompt.numel():] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        temperatures = torch.tensor(
            [request.params.temperature or 1.0 for request in batch], dtype=torch.float32, device=device
        ).unsqueeze(-1)
        self.batches_run += 1
        cache_arg, extra = _forward_kwargs(model)
        cache = None
        while True:
            output = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_arg: cache},
                **extra,
            )
            self.forward_calls += 1
            cache = getattr(output, cache_arg)
            logprobs = torch.log_softmax(output.logits[:, -1, :].float() / temperatures, dim=-1)
            next_ids = input_ids[:, -1].clone()
            for index, row in enumerate(rows):
                if row.finish_reason is not None:
                    continue
                if row.params.temperature == 0:
                    token = int(torch.argmax(logprobs[index]).item())
                else:
                    token = _draw(logprobs[index], row.params, row.generator)
                row.add(token, float(logprobs[index, token].item()))
                next_ids[index] = token
            if all(row.finish_reason is not None for row in rows):
                break
            input_ids = next_ids.unsqueeze(-1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=-1)
            position_ids = position_ids[:, -1:] + 1
        return [
            SampleResult(
                token_ids=tuple(row.token_ids),
                logprobs=tuple(row.logprobs),
                finish_reason=row.finish_reason,
                policy_version=version,
            )
            for row in rows
        ]


def _forward_kwargs(model: Any) -> tuple[str, dict[str, Any]]:
    """The KV-cache argument name (`cache` since transformers 5.2x, else `past_key_values`)."""
    parameters = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in parameters else "past_key_values"
    extra = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
    return cache_arg, extra


def _deliver(request: _Request, *, result: SampleResult | None = None, error: BaseException | None = None) -> None:
    def resolve() -> None:
        if request.future.done():  # the caller cancelled
            return
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(result)

    try:
        request.loop.call_soon_threadsafe(resolve)
    except RuntimeError:
        pass  # the caller's event loop is closed: nobody is waiting for this result
