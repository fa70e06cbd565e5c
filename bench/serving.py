"""Decoding speed of the in-process sampler on a LoRA policy: through peft's adapter layers
(`trainer.serve_merged=false`, the baseline) against the merged copy the trainer publishes
(`serve_merged=true`, `trainers/_serving.py`), in one run.

Each setup builds SmolLM2-135M-Instruct (`agentcore-rl models prepare smollm2-135m-instruct`) with a
`LocalTrainer` and its `HFLocalSampler`, takes one GRPO step (so the adapters are not zero), then
samples `--rows` requests at once, each a `--prompt`-token prompt and exactly `--tokens` new tokens
(no stop ids), `--repeats` times. Printed: tokens/s per setup and repeat, the best of each, and
the ratio merged / adapters, with the load average.

    HF_HUB_OFFLINE=1 python bench/serving.py [--rows 16] [--prompt 900] [--tokens 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=900)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from agentcore_rl_harness.models import load_model, resolve_model
    from agentcore_rl_harness.records import SamplingParams, Trace
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler
    from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig
    from agentcore_rl_harness.trainers.base import TrainGroup, TrainSample

    path = resolve_model("smollm2-135m-instruct")
    rng = random.Random(0)
    prompts = [[rng.randrange(100, 49000) for _ in range(args.prompt)] for _ in range(args.rows)]
    params = SamplingParams(temperature=1.0, max_tokens=args.tokens, seed=1)

    async def sample_all(sampler):
        return await asyncio.gather(*(sampler.sample(prompt_token_ids=p, params=params) for p in prompts))

    def tokens_per_second(sampler) -> float:
        started = time.perf_counter()
        results = asyncio.run(sample_all(sampler))
        return sum(len(r.token_ids) for r in results) / (time.perf_counter() - started)

    best = {}
    for merged in (False, True):
        sampler = HFLocalSampler(load_model(path), prefix_cache_tokens=0)
        trainer = LocalTrainer(sampler.model, sampler=sampler,
                               config=LocalTrainerConfig(lr=1e-3, serve_merged=merged))
        first = asyncio.run(sample_all(sampler))[:2]
        traces = [Trace(token_ids=tuple(prompts[i]) + r.token_ids, prompt_length=args.prompt,
                        loss_mask=(1,) * len(r.token_ids), logprobs=r.logprobs, finish_reason="length")
                  for i, r in enumerate(first)]
        trainer.step_sync([TrainGroup("g", (TrainSample("a", 1.0, (traces[0],)), TrainSample("b", 0.0, (traces[1],))))])
        label = "merged" if merged else "adapters"
        seen = [tokens_per_second(sampler) for _ in range(args.repeats)]
        best[label] = max(seen)
        print(f"{label:<9} tokens/s per repeat: {', '.join(f'{v:.1f}' for v in seen)}", flush=True)
        sampler.close()
    print(f"rows {args.rows}, prompt {args.prompt} tokens, {args.tokens} new tokens each")
    print(f"merged / adapters tokens/s: {best['merged'] / best['adapters']:.2f}x "
          f"(best of {args.repeats}); load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
