"""Aggregate tokens/s of HFLocalSampler on SmolLM2-135M: 1 session vs 8 concurrent sessions.

Run: HF_HUB_OFFLINE=1 python bench/sampler.py [--tokens 48] [--sessions 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentcore_rl_harness.models import load_tokenizer, prepare_model
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler


async def _run(sampler: HFLocalSampler, prompt: list[int], sessions: int, tokens: int) -> float:
    params = [SamplingParams(temperature=1.0, max_tokens=tokens, seed=i) for i in range(sessions)]
    start = time.perf_counter()
    results = await asyncio.gather(
        *(sampler.sample(prompt_token_ids=prompt, params=p) for p in params)
    )
    elapsed = time.perf_counter() - start
    return sum(len(result.token_ids) for result in results) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="best of N (the CPU may be shared)")
    args = parser.parse_args()

    path = prepare_model("smollm2-135m-instruct", progress=print)
    tokenizer = load_tokenizer(path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a short poem about the sea."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    sampler = HFLocalSampler.from_path(path, max_batch_size=args.sessions)
    try:
        asyncio.run(_run(sampler, prompt, 1, 4))  # warm-up
        single = max(asyncio.run(_run(sampler, prompt, 1, args.tokens)) for _ in range(args.repeats))
        batches_before = sampler.batches_run
        batched = max(
            asyncio.run(_run(sampler, prompt, args.sessions, args.tokens)) for _ in range(args.repeats)
        )
        batches = sampler.batches_run - batches_before
    finally:
        sampler.close()
    print(f"prompt {len(prompt)} tokens, {args.tokens} new tokens per session, T=1, best of {args.repeats}")
    print(f"1 session:  {single:7.1f} tok/s")
    print(f"{args.sessions} sessions: {batched:7.1f} tok/s aggregate")
    print(f"batches per {args.sessions}-session round: {batches / args.repeats:.1f}")
    print(f"ratio:      {batched / single:7.2f}x")


if __name__ == "__main__":
    main()
