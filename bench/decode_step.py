"""One decode step and one prefill of SmolLM2-135M in fp32, in plain bfloat16, and in bfloat16 with
fp32 attention over an fp32 KV cache (how `HFLocalSampler` serves a bfloat16 model,
`samplers/_fp32_attention.py`), all measured in this run.

A batch of `--rows` rows is prefilled with `--context` random tokens (one forward pass, timed), then
`--steps` single-token decode steps run on the sampler's growing cache (`samplers/_kv.py`); the
median step is reported, with the ratio to fp32.

    HF_HUB_OFFLINE=1 python bench/decode_step.py [--rows 16] [--context 800] [--steps 12]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from agentcore_rl_harness.models import load_model, prepare_model
from agentcore_rl_harness.samplers import _fp32_attention, _kv


def measure(path: str, dtype: str, fp32_attention: bool, rows: int, context: int, steps: int) -> tuple[float, float]:
    """(prefill seconds, median decode-step seconds)."""
    model = load_model(path, dtype=dtype)
    if fp32_attention:
        _fp32_attention.use_fp32_attention(model)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40000, (rows, context), generator=generator)
    mask = torch.ones((rows, context), dtype=torch.long)
    with torch.inference_mode():
        cache = _kv.new_cache(float32=fp32_attention)
        start = time.perf_counter()
        model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - start
        token = torch.randint(100, 40000, (rows, 1), generator=generator)
        times = []
        for step in range(steps):
            mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=-1)
            start = time.perf_counter()
            model(input_ids=token, attention_mask=mask, position_ids=torch.full((rows, 1), context + step),
                  cache=cache, use_cache=True, logits_to_keep=1)
            times.append(time.perf_counter() - start)
    return prefill, sorted(times)[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--context", type=int, default=800)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    path = str(prepare_model("smollm2-135m-instruct", progress=print))
    print(f"{args.rows} rows x {args.context} tokens, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.2f}")
    base = None
    for label, dtype, fp32_attention in (("fp32", "float32", False), ("bf16", "bfloat16", False),
                                         ("bf16 + fp32 attention", "bfloat16", True)):
        prefill, step = measure(path, dtype, fp32_attention, args.rows, args.context, args.steps)
        base = base or (prefill, step)
        print(f"{label:<22} prefill {prefill:6.2f} s ({base[0] / prefill:.2f}x)   "
              f"decode step {1000 * step:6.1f} ms ({base[1] / step:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
