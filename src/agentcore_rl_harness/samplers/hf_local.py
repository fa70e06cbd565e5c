"""`HFLocalSampler`: an in-process transformers `SamplingBackend` with continuous batching.

One worker thread owns the model and a running batch. Each loop iteration it admits waiting
requests (up to `max_batch_size` rows in flight), prefills them as their own left-padded batch,
merges their KV-cache rows into the running batch (`_kv`), then runs one decode step for every
row. A row that finishes is delivered at once and leaves the batch; a row whose caller cancelled
leaves at the next step. So a request waits at most one decode step plus its own prefill, however
long the other rows run. Position ids count only a row's real tokens, so padding never shifts them.

Logprob contract: `logprobs[i] = log_softmax(logits / T)[token_ids[i]]` in fp32, with T the
request's temperature, taken BEFORE top-k / top-p truncation (truncation only restricts which
tokens can be drawn). T == 0 means greedy argmax, and its logprob is taken at T = 1. A token in
`stop_token_ids` ends the sample, is included in `token_ids` with its logprob, and gives finish
reason "stop"; reaching `max_tokens` gives "length". No stop ids are added implicitly (not even
EOS): the caller passes them. A seeded request draws only from its own generator, so its tokens
do not depend on what else is in the batch.

Prefix caching (`prefix_cache_tokens`, 0 disables): after a prefill, and when a row finishes, the
KV of the positions the model computed (the prompt, plus every sampled token but the last, which
was never fed) is kept in an LRU (`_prefix_cache`). A new prompt reuses the longest cached common
prefix (at least one block of 16 tokens, never the whole prompt: its last token is always fed, to
get logits) and prefills only the rest. Identical prompts admitted together are prefilled once
(GRPO groups), and a prefix shared by several new prompts beyond their cache hits (one system prompt,
different questions) is prefilled once first. Cached KV is only valid for the weights that computed
it: `publish_weights` and `set_policy_version` clear the cache, and so does any in-place change to the
parameters that torch's version counters see (an optimizer step), checked at every admission.
KV bytes per cached token = layers x 2 x kv_heads x head_dim x dtype bytes; SmolLM2-135M in fp32:
30 x 2 x 3 x 64 x 4 = 46,080 (45 KiB), so the default 32,768 tokens hold up to ~1.4 GiB.

Long because the worker thread's running batch is one piece of state: admission, prefill, the KV
merge, the decode step, delivery and the prefix cache's bookkeeping all change the same rows, on
the one thread that owns the model. What does not need that state is separate: KV row surgery in
`_kv.py`, the cache in `_prefix_cache.py`, token drawing and tempered logprobs in `decoding.py`.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MissingDependencyError, SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..heap import start_heap_trimmer
from ..records import FinishReason, SampleResult, SamplingParams

try:
    import torch

    from . import _fp32_attention, _kv, _prefix_cache, _swaps
    from .decoding import cache_arguments, draw, tempered_logprobs, validate_params
except ImportError as exc:  # pragma: no cover - exercised only without the [local] extra
    raise MissingDependencyError(
        f"the hf_local sampler needs torch and transformers ({exc}); "
        "pip install 'agentcore-rl-harness[local]'"
    ) from exc

_STOP = object()
_PREFILL_CHUNK = 512  # prompt columns per prefill forward pass (bounds activation memory)
_MIN_SHARED_GAIN = 32  # prefill a prefix shared by new prompts first only if it saves this many tokens each


@dataclass
class _Request:
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    on_token: TokenCallback | None = None


class _Row:
    """Decoding state of one request inside the running batch."""

    def __init__(self, request: _Request, policy_version: int, device: Any) -> None:
        self.request = request
        self.params = request.params
        self.policy_version = policy_version
        self.stop_ids = frozenset(request.params.stop_token_ids)
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish_reason: FinishReason | None = None
        self.generator = None
        if request.params.seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(request.params.seed)
        params = request.params
        self.plain = params.temperature > 0 and params.top_k == 0 and params.top_p >= 1.0 and self.generator is None

    @property
    def cancelled(self) -> bool:
        return self.request.future.done()  # only the caller can finish it before we deliver

    def add(self, token_id: int, logprob: float) -> None:
        self.token_ids.append(token_id)
        self.logprobs.append(logprob)
        if self.request.on_token is not None and not self.cancelled:
            _call_in_loop(self.request, self.request.on_token, token_id, logprob)
        if token_id in self.stop_ids:
            self.finish_reason = FinishReason.STOP
        elif len(self.token_ids) >= self.params.max_tokens:
            self.finish_reason = FinishReason.LENGTH

    def result(self) -> SampleResult:
        return SampleResult(
            token_ids=tuple(self.token_ids),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish_reason,
            policy_version=self.policy_version,
        )


@dataclass
class _Batch:
    """The running batch: rows, their left-padded KV cache and mask, each row's next position."""

    rows: list[_Row]
    cache: Any
    attention_mask: torch.Tensor  # [rows, columns], 1 for real tokens
    positions: torch.Tensor  # [rows], number of real tokens so far = next position id
    last_ids: torch.Tensor  # [rows], the token each row feeds next


def _sample_tokens(rows: list[_Row], logits: torch.Tensor) -> tuple[list[int], list[float]]:
    """One token per row from last-position logits [rows, vocab]: (token ids, their logprobs)."""
    temperatures = torch.tensor([row.params.temperature for row in rows], dtype=torch.float32, device=logits.device)
    logprobs = tempered_logprobs(logits, temperatures)
    tokens = torch.argmax(logprobs, dim=-1)  # right for greedy rows; the others are overwritten
    plain = [index for index, row in enumerate(rows) if row.plain]
    if plain:
        index = torch.tensor(plain, device=logits.device)
        tokens[index] = torch.multinomial(logprobs[index].exp(), 1).squeeze(-1)
    for index, row in enumerate(rows):
        if row.params.temperature > 0 and not row.plain:
            tokens[index] = draw(logprobs[index], row.params, row.generator)
    picked = logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens.tolist(), picked.tolist()


class HFLocalSampler(SamplingBackend):
    """Token-in/token-out sampling from an in-process transformers causal LM.

    Weights change only between samples (`_swaps.py`): once every row in flight has finished (no new
    row is admitted meanwhile), so each `SampleResult` was sampled entirely under the
    `policy_version` it reports; `set_policy_version` waits for it, `publish_weights` does not. The worker holds `lock` during each forward
    step; code that edits the weights in place must hold it too (and then call `set_policy_version`
    after releasing it). In RL the trainer changes weights only between rollouts, so the wait is
    short; it never holds the lock while rows decode. `batches_run` counts prefill
    batches (requests admitted together), `forward_calls` counts forward passes, `prefill_tokens`
    counts prompt tokens fed through the model (what prefix caching and group dedupe save).
    """

    def __init__(
        self,
        model: Any,
        *,
        max_batch_size: int = 16,
        batch_wait_s: float = 0.005,
        policy_version: int = 0,
        prefix_cache_tokens: int = 32768,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be >= 0 (0 disables the cache), got {prefix_cache_tokens}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.policy_version = policy_version
        self.lock = threading.RLock()
        self.batches_run = 0
        self.forward_calls = 0
        self.prefill_tokens = 0
        self._prefix_cache = _prefix_cache.PrefixCache(prefix_cache_tokens) if prefix_cache_tokens else None
        self._weights_seen: tuple[int, int, int] | None = None
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        self._swaps = _swaps.WeightSwaps(self.lock)
        self._forward_spec: tuple[Any, str, dict[str, Any], bool] | None = None
        self._worker = threading.Thread(target=self._run, name="hf-local-sampler", daemon=True)
        self._worker.start()
        start_heap_trimmer()  # KV rows of changing sizes otherwise fragment glibc's heap (heap.py)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], dtype: str = "float32", **kwargs: Any) -> "HFLocalSampler":
        """Load a named model or a local HF folder (see `models.resolve_model`)."""
        from ..models import load_model, resolve_model

        return cls(load_model(resolve_model(path), dtype=dtype), **kwargs)

    def set_policy_version(self, version: int) -> None:
        """Label later samples with `version`, once the rows in flight have finished (clears the prefix cache)."""

        def relabel() -> None:
            self.policy_version = version
            self.clear_prefix_cache()

        self._swaps.now(relabel)

    def publish_weights(self, model: Any, *, policy_version: int) -> None:
        """`WeightSync`: replace the model once the rows in flight have finished (new requests
        wait meanwhile); returns at once. `settle` waits for the swap."""

        def swap() -> None:
            self.model = model
            self.policy_version = policy_version
            self.clear_prefix_cache()

        self._swaps.later(swap)

    def settle(self) -> None:
        """Wait until the sampler decodes the weights published last (before writing the ones before)."""
        self._swaps.settle()

    def clear_prefix_cache(self) -> None:
        """Forget all cached KV (it was computed under weights that may no longer hold)."""
        with self.lock:
            if self._prefix_cache is not None:
                self._prefix_cache.clear()
            self._weights_seen = None

    @property
    def cached_prefix_tokens(self) -> int:
        """Tokens whose KV the prefix cache holds now (at most `prefix_cache_tokens`)."""
        return self._prefix_cache.cached_tokens if self._prefix_cache is not None else 0

    async def sample(
        self,
        *,
        prompt_token_ids: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> SampleResult:
        if self._closed:
            raise SamplingError("the HF local sampler is closed")
        prompt = tuple(int(token) for token in prompt_token_ids)
        if not prompt:
            raise SamplingError("prompt_token_ids is empty; the model needs at least one token")
        validate_params(params)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and len(prompt) + params.max_tokens > limit:
            raise SamplingError(
                f"prompt of {len(prompt)} tokens plus max_tokens {params.max_tokens} exceeds the "
                f"model's {limit} positions; shorten the prompt or lower max_tokens to at most "
                f"{max(limit - len(prompt), 0)}"
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put(_Request(prompt, params, loop, future, on_token))
        return await future

    async def score(
        self, *, prompt_token_ids: Sequence[int], completion_token_ids: Sequence[int],
        temperature: float = 1.0,
    ) -> tuple[float, ...]:
        """Logprobs of `completion_token_ids` after the prompt under softmax(logits / temperature)
        of the current weights: one forward pass beside the batches, under `lock`."""
        if self._closed:
            raise SamplingError("the HF local sampler is closed")
        prompt = tuple(int(token) for token in prompt_token_ids)
        completion = tuple(int(token) for token in completion_token_ids)
        if not prompt or not completion:
            raise SamplingError(
                f"score needs a non-empty prompt and completion, got {len(prompt)} and "
                f"{len(completion)} tokens"
            )
        return await asyncio.to_thread(self._score, prompt, completion, temperature)

    def _score(self, prompt: tuple[int, ...], completion: tuple[int, ...], temperature: float) -> tuple[float, ...]:
        """One forward pass over what the prefix cache does not hold (teacher-forced turns of one
        conversation share all but their newest tokens), computing vocabulary logits for the
        completion's positions only; the scored sequence's KV is then cached for the next turn."""
        with self.lock, torch.inference_mode():
            model = self.model
            full = prompt + completion
            self._drop_stale_cache()
            cached, payload = self._lookup(prompt)  # at most len(prompt) - 1: its last token is fed
            tail = full[cached:]
            (cache_arg, extra, float32), device = self._forward_arguments(model), _kv.device_of(model)
            cache, past_mask = _kv.cache_with_prefixes([payload], [cached], spare=len(tail), float32=float32,
                                                        device=device)
            keep = len(completion) + 1  # logits at the last prompt position and the completion's
            mask = torch.cat([past_mask, past_mask.new_ones((1, len(tail)))], dim=-1)  # one row, no padding
            output = model(
                input_ids=torch.tensor([tail], dtype=torch.long, device=device), attention_mask=mask,
                position_ids=torch.arange(cached, len(full), device=device).unsqueeze(0), use_cache=True,
                **{cache_arg: cache}, **({"logits_to_keep": keep} if extra else {}),
            )
            self.prefill_tokens += len(tail)
            self._remember([full], cache, mask)
            logits = output.logits[0, -keep:-1]
            targets = torch.tensor(completion, dtype=torch.long, device=device).unsqueeze(-1)
            return tuple(tempered_logprobs(logits, temperature).gather(-1, targets).squeeze(-1).tolist())

    def close(self) -> None:
        """Stop the worker after the requests already queued are served."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._worker.join()

    # -- weight changes -------------------------------------------------------------------------

    def _admit(self, waiting: deque[_Request], room: int) -> list[_Row]:
        with self._swaps.state:
            if not self._swaps.open():
                return []
            requests = [waiting.popleft() for _ in range(min(room, len(waiting)))]
            self._swaps.in_flight += len(requests)
            version = self.policy_version
        return [_Row(request, version, _kv.device_of(self.model)) for request in requests]

    def _release(self, count: int) -> None:
        self._swaps.release(count)

    # -- the worker -----------------------------------------------------------------------------

    def _run(self) -> None:
        running: _Batch | None = None
        waiting: deque[_Request] = deque()
        closing = False
        while True:
            if running is None and not waiting:
                if closing:
                    return
                closing = self._take(waiting, block=True)
            else:
                closing = self._take(waiting, block=False) or closing
            waiting = deque(request for request in waiting if not request.future.done())
            if running is not None:
                running = self._without(running, [row for row in running.rows if row.cancelled])
            active = len(running.rows) if running is not None else 0
            admitted = self._admit(waiting, self.max_batch_size - active) if waiting else []
            if admitted:
                joined = self._guarded(admitted, self._prefill, admitted)
                if joined is not None and running is not None:
                    running = self._guarded(running.rows + joined.rows, _merge, running, joined)
                elif joined is not None:
                    running = joined
            if running is not None:
                running = self._guarded(running.rows, self._step, running)
            elif waiting and not admitted:
                self._swaps.wait_open(timeout=0.1)  # a weight swap is pending: wait for it before admitting

    def _take(self, waiting: deque[_Request], *, block: bool) -> bool:
        """Move queued requests to `waiting`; True once `close` was called.

        When idle (`block`), wait for the first request, then `batch_wait_s` for others to join it.
        """
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
            deadline = time.monotonic() + self.batch_wait_s if block else None
            while True:
                if item is _STOP:
                    return True
                waiting.append(item)
                remaining = deadline - time.monotonic() if deadline is not None else 0
                if remaining > 0 and len(waiting) < self.max_batch_size:
                    item = self._queue.get(timeout=remaining)
                else:
                    item = self._queue.get_nowait()
        except queue.Empty:
            return False

    def _guarded(self, rows: list[_Row], work: Any, *args: Any) -> _Batch | None:
        """Run `work`; on failure every affected caller gets a SamplingError and its row is freed."""
        try:
            with self.lock, torch.inference_mode():
                batch = work(*args)
        except Exception as exc:
            for row in rows:
                error = SamplingError(
                    f"HF local sampler failed on a batch of {len(rows)} requests: {type(exc).__name__}: {exc}"
                )
                error.__cause__ = exc
                _deliver(row.request, error=error)
            self._release(len(rows))
            return None
        return batch

    def _forward_arguments(self, model: Any) -> tuple[str, dict[str, Any], bool]:
        """`cache_arguments(model)` and whether its KV cache is kept in fp32, once per model.

        A bfloat16 / float16 model is served with fp32 attention over an fp32 KV cache
        (`_fp32_attention.py`: faster on CPUs without native bfloat16, and exact attention)."""
        if self._forward_spec is None or self._forward_spec[0] is not model:
            float32 = _fp32_attention.low_precision(model)
            if float32:
                _fp32_attention.use_fp32_attention(model)
            self._forward_spec = (model, *cache_arguments(model), float32)
        return self._forward_spec[1], self._forward_spec[2], self._forward_spec[3]

    def _forward(self, **inputs: Any) -> torch.Tensor:
        model = self.model
        cache_arg, extra, _ = self._forward_arguments(model)
        cache = inputs.pop("cache")
        output = model(**inputs, use_cache=True, **{cache_arg: cache}, **extra)
        self.forward_calls += 1
        return output.logits[:, -1, :]

    def _prefill(self, rows: list[_Row]) -> _Batch | None:
        """Prefill the admitted rows: each distinct prompt once, reusing cached prefixes."""
        self.batches_run += 1
        self._drop_stale_cache()
        rows_by_prompt: dict[tuple[int, ...], list[_Row]] = {}
        for row in rows:
            rows_by_prompt.setdefault(row.request.prompt_token_ids, []).append(row)
        prompts = list(rows_by_prompt)
        if self._prefix_cache is not None and len(prompts) > 1:
            self._prefill_shared_prefixes(prompts)
        hits = [self._lookup(prompt) for prompt in prompts]
        joined, joined_logits = None, []
        for group in _prefix_cache.buckets([len(prompt) - hits[i][0] for i, prompt in enumerate(prompts)]):
            group_prompts = [prompts[i] for i in group]
            cache, mask, logits = self._prefill_group(group_prompts, [hits[i] for i in group])
            self._remember(group_prompts, cache, mask)
            group_rows = [row for prompt in group_prompts for row in rows_by_prompt[prompt]]
            if len(group_rows) > len(group_prompts):  # identical prompts: copy the rows' KV
                copies = [j for j, prompt in enumerate(group_prompts) for _ in rows_by_prompt[prompt]]
                index = torch.tensor(copies, device=mask.device)
                cache, mask = _kv.select_rows(cache, mask, index)
                logits = logits.index_select(0, index)
            last_ids = mask.new_tensor([row.request.prompt_token_ids[-1] for row in group_rows])
            batch = _Batch(group_rows, cache, mask, mask.sum(-1), last_ids)
            joined = batch if joined is None else _merge(joined, batch)
            joined_logits.append(logits)
        return self._advance(joined, torch.cat(joined_logits))

    def _prefill_shared_prefixes(self, prompts: list[tuple[int, ...]], depth: int = 0) -> None:
        """Prefill and cache the prefixes several `prompts` share beyond their cache hits."""
        hits = [self._lookup(prompt)[0] for prompt in prompts]
        shared = [
            prefix
            for prefix in _prefix_cache.shared_prefixes(prompts, hits, _MIN_SHARED_GAIN)
            if len(prefix) <= self._prefix_cache.capacity_tokens
        ]
        if not shared or depth > 8:
            return
        self._prefill_shared_prefixes(shared, depth + 1)
        hits = [self._lookup(prefix) for prefix in shared]
        for group in _prefix_cache.buckets([len(prefix) - hits[i][0] for i, prefix in enumerate(shared)]):
            group_prefixes = [shared[i] for i in group]
            cache, mask, _ = self._prefill_group(group_prefixes, [hits[i] for i in group])
            self._remember(group_prefixes, cache, mask)

    def _lookup(self, prompt: tuple[int, ...]) -> tuple[int, Any]:
        if self._prefix_cache is None:
            return 0, None
        return self._prefix_cache.lookup(prompt, max_length=len(prompt) - 1)

    def _prefill_group(
        self, prompts: list[tuple[int, ...]], hits: list[tuple[int, Any]]
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """One left-padded prefill of the prompts' uncached tails: (cache, mask, last-position logits).

        Row i's columns are its cached prefix, padding, then its tail, so tails align on the right.
        """
        cached = [length for length, _ in hits]
        tails = [prompt[length:] for prompt, (length, _) in zip(prompts, hits)]
        width = max(len(tail) for tail in tails)
        float32, device = self._forward_arguments(self.model)[2], _kv.device_of(self.model)
        cache, past_mask = _kv.cache_with_prefixes([payload for _, payload in hits], cached, spare=width,
                                                   float32=float32, device=device)
        input_ids = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        tail_mask = torch.zeros_like(input_ids)
        for index, tail in enumerate(tails):
            input_ids[index, width - len(tail):] = torch.tensor(tail, dtype=torch.long, device=device)
            tail_mask[index, width - len(tail):] = 1
        position_ids = torch.tensor(cached, device=device).unsqueeze(-1) + (tail_mask.cumsum(-1) - 1).clamp(min=0)
        attention_mask = torch.cat([past_mask, tail_mask], dim=-1)
        past = past_mask.shape[1]
        for start in range(0, width, _PREFILL_CHUNK):
            end = min(start + _PREFILL_CHUNK, width)
            logits = self._forward(
                input_ids=input_ids[:, start:end],
                attention_mask=attention_mask[:, : past + end],
                position_ids=position_ids[:, start:end],
                cache=cache,
            )
        self.prefill_tokens += sum(len(tail) for tail in tails)
        return cache, attention_mask, logits

    def _remember(
        self, sequences: list[Sequence[int]], cache: Any, mask: torch.Tensor, rows: list[int] | None = None
    ) -> None:
        """Cache the KV of `sequences[i]`, whose positions (exactly) row `rows[i]` (default i) of `cache` holds."""
        if self._prefix_cache is None:
            return
        for index, tokens in enumerate(sequences):
            row = index if rows is None else rows[index]
            if int(mask[row].sum()) != len(tokens):
                raise RuntimeError(f"row {row} holds {int(mask[row].sum())} positions, not the {len(tokens)} to cache")
            if not self._prefix_cache.covers(tokens):
                self._prefix_cache.insert(tokens, _kv.row_tensors(cache, mask, row))

    def _drop_stale_cache(self) -> None:
        """Clear the prefix cache if the model or its parameters changed since it was filled."""
        if self._prefix_cache is None:
            return
        seen = _weights_fingerprint(self.model)
        if seen != self._weights_seen:
            self._prefix_cache.clear()
            self._weights_seen = seen

    def _step(self, batch: _Batch) -> _Batch | None:
        batch.attention_mask = torch.cat(
            [batch.attention_mask, batch.attention_mask.new_ones((len(batch.rows), 1))], dim=-1
        )
        logits = self._forward(
            input_ids=batch.last_ids.unsqueeze(-1),
            attention_mask=batch.attention_mask,
            position_ids=batch.positions.unsqueeze(-1),
            cache=batch.cache,
        )
        batch.positions = batch.positions + 1
        return self._advance(batch, logits)

    def _advance(self, batch: _Batch, logits: torch.Tensor) -> _Batch | None:
        """Sample one token per row, deliver the rows that finished, and drop them."""
        tokens, logprobs = _sample_tokens(batch.rows, logits)
        for row, token, logprob in zip(batch.rows, tokens, logprobs):
            row.add(token, logprob)
        batch.last_ids = torch.tensor(tokens, dtype=torch.long, device=logits.device)
        finished = [row for row in batch.rows if row.finish_reason is not None]
        for row in finished:
            _deliver(row.request, result=row.result())
        if finished and self._prefix_cache is not None:
            fed = [row.request.prompt_token_ids + tuple(row.token_ids[:-1]) for row in finished]
            rows = [batch.rows.index(row) for row in finished]
            self._remember(fed, batch.cache, batch.attention_mask, rows)
        return self._without(batch, finished)

    def _without(self, batch: _Batch, leaving: list[_Row]) -> _Batch | None:
        if not leaving:
            return batch
        self._release(len(leaving))
        gone = [index for index, row in enumerate(batch.rows) if row in leaving]
        if len(gone) == len(batch.rows):
            return None
        cache, attention_mask, order = _kv.drop_rows(batch.cache, batch.attention_mask, gone)
        index = torch.tensor(order, device=attention_mask.device)
        return _Batch(
            [batch.rows[i] for i in order],
            cache,
            attention_mask,
            batch.positions.index_select(0, index),
            batch.last_ids.index_select(0, index),
        )


def _merge(running: _Batch, joined: _Batch) -> _Batch:
    cache, attention_mask = _kv.concat_rows(running.cache, running.attention_mask, joined.cache, joined.attention_mask)
    return _Batch(
        running.rows + joined.rows,
        cache,
        attention_mask,
        torch.cat([running.positions, joined.positions]),
        torch.cat([running.last_ids, joined.last_ids]),
    )


def _weights_fingerprint(model: Any) -> tuple[int, int, int] | None:
    """(model id, parameter count, sum of version counters): changes when a parameter is edited in place."""
    try:
        parameters = list(model.parameters())
        return id(model), len(parameters), sum(parameter._version for parameter in parameters)
    except (AttributeError, RuntimeError):  # no parameters() or inference tensors: rely on publish_weights
        return None


def _call_in_loop(request: _Request, function: Any, *args: Any) -> None:
    try:
        request.loop.call_soon_threadsafe(function, *args)
    except RuntimeError:
        pass  # the caller's event loop is closed: nobody is waiting


def _deliver(request: _Request, *, result: SampleResult | None = None, error: BaseException | None = None) -> None:
    def resolve() -> None:
        if request.future.done():  # the caller cancelled
            return
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(result)

    _call_in_loop(request, resolve)
