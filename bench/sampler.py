"""Agent-workload throughput of HFLocalSampler: prefix cache on vs off, and the old static batcher.

N concurrent sessions (default 8 and 16) each run 3 sequential turns on SmolLM2-135M, in GRPO groups:
the G sessions of a group (default 8) start with the IDENTICAL first prompt (365 tokens: a system
prompt with five few-shot examples, 351 tokens shared by every group, then the group's question);
each later prompt is the previous prompt + the sampled reply + a 28-token tool result. At most 64
new tokens per turn, T=1, stopping at <|im_end|>, seeded per session and turn. Samplers, all in
one process on one model:
  static    - the batcher before continuous batching (a batch runs until its longest row ends),
              copied below as `StaticBatchSampler`;
  no-cache  - HFLocalSampler(prefix_cache_tokens=0): continuous batching, identical prompts admitted
              together still prefilled once;
  cache     - HFLocalSampler with the prefix cache (default 32768 tokens).
`prefill` is the number of prompt tokens fed through the model (HFLocalSampler.prefill_tokens).

Run (only on a quiet machine: load average < 2.5):
  HF_HUB_OFFLINE=1 python bench/sampler.py [--sessions 8 16] [--group 8] [--repeat 2]
      [--samplers static no-cache cache]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import os
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.models import load_model, load_tokenizer, prepare_model
from agentcore_rl_harness.records import FinishReason, SampleResult, SamplingParams
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

SYSTEM = (
    "You are a careful assistant with a calculator tool. To use it, reply with a JSON object "
    '{"tool": "calculator", "expression": "..."} and wait for the result, then answer with the number only.'
)
EXAMPLES = [(17, 23, 391), (45, 12, 540), (9, 81, 729), (120, 7, 840), (33, 33, 1089)]


async def _session(sampler: Any, prompt: list[int], suffix: list[int], turns: int, params: SamplingParams,
                   seed: int) -> int:
    """Seeded per session and turn, so every sampler sees the same replies (up to float rounding)."""
    generated = 0
    for turn in range(turns):
        result = await sampler.sample(prompt_token_ids=prompt, params=dataclasses.replace(params, seed=seed + turn))
        generated += len(result.token_ids)
        prompt = prompt + list(result.token_ids) + suffix
    return generated


async def _workload(sampler: Any, prompts: list[list[int]], suffixes: list[list[int]], turns: int, tokens: int,
                    stop: int) -> tuple[int, float, float]:
    """(tokens generated, wall seconds, CPU seconds of this process: less sensitive to other load)."""
    params = SamplingParams(temperature=1.0, max_tokens=tokens, stop_token_ids=(stop,))
    start, cpu_start = time.perf_counter(), time.process_time()
    counts = await asyncio.gather(
        *(_session(sampler, prompt, suffix, turns, params, seed=100 * index)
          for index, (prompt, suffix) in enumerate(zip(prompts, suffixes)))
    )
    return sum(counts), time.perf_counter() - start, time.process_time() - cpu_start


def _prompts(tokenizer: Any, sessions: int, group: int) -> tuple[list[list[int]], list[list[int]]]:
    """First prompts (identical within a group of `group` sessions) and each session's tool-result suffix."""

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    system = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    for left, right, product in EXAMPLES:
        system += (
            f"<|im_start|>user\nWhat is {left} times {right}?<|im_end|>\n<|im_start|>assistant\n"
            f'{{"tool": "calculator", "expression": "{left}*{right}"}}<|im_end|>\n'
            f"<|im_start|>user\nTool result: {product}<|im_end|>\n<|im_start|>assistant\n{product}<|im_end|>\n"
        )
    prompts, suffixes = [], []
    for index in range(sessions):
        rng = random.Random(index // group)  # one question per group
        question = (f"<|im_start|>user\nWhat is {rng.randrange(100, 999)} times {rng.randrange(10, 99)}?"
                    "<|im_end|>\n<|im_start|>assistant\n")
        prompts.append(ids(system + question))
        result = random.Random(index).randrange(10**4, 10**5)
        suffixes.append(ids(f"<|im_end|>\n<|im_start|>user\nTool result: {result}. "
                            "Now answer with the number only.<|im_end|>\n<|im_start|>assistant\n"))
    return prompts, suffixes


SAMPLERS = {
    "static": lambda model: StaticBatchSampler(model, max_batch_size=16),
    "no-cache": lambda model: HFLocalSampler(model, max_batch_size=16, prefix_cache_tokens=0),
    "cache": lambda model: HFLocalSampler(model, max_batch_size=16),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--group", type=int, default=8, help="sessions per GRPO group (identical first prompt)")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs per sampler; ratios use the best")
    parser.add_argument("--samplers", nargs="+", choices=list(SAMPLERS), default=["no-cache", "cache"])
    args = parser.parse_args()

    torch.manual_seed(0)
    path = prepare_model("smollm2-135m-instruct", progress=print)
    tokenizer = load_tokenizer(path)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = load_model(path)
    print(f"load average {os.getloadavg()[0]:.2f}, threads {torch.get_num_threads()}, {args.turns} turns, "
          f"<= {args.tokens} new tokens per turn, T=1, groups of {args.group} identical first prompts")
    print(f"{'sessions':>8} {'sampler':>9} {'prompt':>6} {'tokens':>7} {'prefill':>8} {'wall s':>7} {'tok/s':>7} "
          f"{'turns/s':>8} {'cpu s':>6} {'load':>5}")
    for sessions in args.sessions:
        prompts, suffixes = _prompts(tokenizer, sessions, args.group)
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeat):  # interleaved, so a burst of outside load hits every sampler alike
            for name in args.samplers:
                sampler = SAMPLERS[name](model)
                try:
                    asyncio.run(_workload(sampler, [[5, 6, 7]], [[]], 1, 4, stop))  # warm-up, shares no prefix
                    fed_before = getattr(sampler, "prefill_tokens", 0)
                    tokens, elapsed, cpu = asyncio.run(
                        _workload(sampler, prompts, suffixes, args.turns, args.tokens, stop)
                    )
                    fed = sampler.prefill_tokens - fed_before if isinstance(sampler, HFLocalSampler) else "-"
                finally:
                    sampler.close()
                rate = (tokens / elapsed, sessions * args.turns / elapsed)
                best[name] = max(best.get(name, rate), rate)
                print(f"{sessions:>8} {name:>9} {len(prompts[0]):>6} {tokens:>7} {fed:>8} {elapsed:>7.1f} "
                      f"{rate[0]:>7.1f} {rate[1]:>8.2f} {cpu:>6.1f} {os.getloadavg()[0]:>5.2f}", flush=True)
        base = args.samplers[0]
        for name in args.samplers[1:]:
            print(f"{sessions:>8} {'ratio':>9} {name}/{base} (best of {args.repeat}): "
                  f"tok/s {best[name][0] / best[base][0]:.2f}x, turns/s {best[name][1] / best[base][1]:.2f}x",
                  flush=True)


# ---- baseline: the static-batching HFLocalSampler from git HEAD (before continuous batching) ----

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


class StaticBatchSampler:
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


if __name__ == "__main__":
    main()
