"""One `trainer=skyrl` GRPO step against a running SkyRL Tinker API server; prints a JSON verdict.

Run with the python that has the SkyRL-matched tinker SDK (tinker 0.24.1 for skyrl 0.3.0) and
this package importable: `python skyrl_client_check.py --base-url URL --base-model MODEL
--server-version 0.3.0`. The trainer is built the way a run builds it (`compose_config` with
`trainer=skyrl` overrides, then the registry's factory), samples four completions, trains one
step rewarding the first, and samples again with the same seed. Exit status 0 and the JSON on
the last stdout line are the result; the caller asserts on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--server-version", required=True)
    args = parser.parse_args()
    os.environ.setdefault("TINKER_TELEMETRY", "0")

    import tinker

    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.records import SamplingParams, Trace
    from agentcore_rl_harness.trainers.base import TrainGroup, TrainSample
    from agentcore_rl_harness.trainers.registry import spec_for

    composed = compose_config([
        "trainer=skyrl", f"trainer.base_url={args.base_url}", f"trainer.server_version={args.server_version}",
        f"trainer.base_model={args.base_model}", "trainer.max_grad_norm=null", "trainer.lora_rank=8",
        "trainer.lr=1e-2", "sampling.temperature=1.0",
    ])
    started = time.perf_counter()
    trainer = spec_for("skyrl").load_factory()(
        section=composed.typed.trainer, model_dir=None, tokenizer=None, config=composed.typed)
    built_s = time.perf_counter() - started

    async def sample_all(seeds: list[int]) -> list:
        return [await trainer.sampler.sample(prompt_token_ids=prompt, params=SamplingParams(max_tokens=6, seed=seed))
                for seed in seeds]

    try:
        prompt = [1, 17, 42, 99, 7]
        before = asyncio.run(sample_all([0, 1, 2, 3]))
        traces = [Trace(token_ids=tuple(prompt) + tuple(result.token_ids), prompt_length=len(prompt),
                        loss_mask=(1,) * len(result.token_ids), logprobs=tuple(result.logprobs),
                        finish_reason=result.finish_reason, metadata={"policy_versions": [result.policy_version]})
                   for result in before]
        rewards = [1.0, 0.0, 0.0, 0.0]
        group = TrainGroup("g", tuple(TrainSample(str(index), reward, (trace,))
                                      for index, (reward, trace) in enumerate(zip(rewards, traces))))
        step_started = time.perf_counter()
        metrics = asyncio.run(trainer.step(groups=[group]))
        step_s = time.perf_counter() - step_started
        after = asyncio.run(sample_all([0]))[0]
        verdict = {
            "tinker_version": tinker.__version__,
            "policy_version_before": [result.policy_version for result in before],
            "policy_version": trainer.policy_version,
            "sampler_policy_version": trainer.sampler.policy_version,
            "after_policy_version": after.policy_version,
            "step_policy_version": metrics.policy_version,
            "loss": metrics.loss,
            "grad_norm": metrics.grad_norm,
            "sampler_kl": metrics.sampler_kl,
            "trained_tokens": metrics.trained_tokens,
            "sampled_tokens": sum(len(result.token_ids) for result in before),
            "before_tokens": list(before[0].token_ids),
            "before_logprobs": list(before[0].logprobs),
            "after_tokens": list(after.token_ids),
            "after_logprobs": list(after.logprobs),
            "build_s": round(built_s, 2),
            "step_s": round(step_s, 2),
        }
    finally:
        trainer.close()
    print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
