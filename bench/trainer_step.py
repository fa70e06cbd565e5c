"""LocalTrainer step time vs a bare torch forward + backward + AdamW step, on SmolLM2-135M.

Same model (LoRA-wrapped the same way for the LoRA rows), same batch (8 traces x 200 tokens,
prompt 40 + 160 trained tokens, two groups of four), fp32. Each (mode, runner) pair runs in its own
process so peak RSS (ru_maxrss) belongs to it alone. Best of N after one warm-up step.
Target: trainer / bare <= 1.3.

Second scenario, `--scenario grpo`: a realistic GRPO batch, 4 groups x 8 samples behind a
350-token prompt (300-token system prompt + few-shot shared by all, 50-token question per group),
~60-token completions of which ~27 are trained (tool call, untrained tool output, answer); LoRA,
`trainer.share_prefix` off vs on, each in its own process.

Third scenario, `--scenario memory`: the GRPO batch with prefix sharing on, one process per
`trainer.micro_batch_tokens` value (4096, the old default, and 1024, the current one): peak RSS and
step time of each, and the ratios against 4096 measured in the same run.

Fourth scenario, `--scenario layers`: the GRPO batch with prefix sharing on, one process per
`trainer.lora_layers` value (null = adapters on all 30 layers, 15 = the top half): step time, peak
RSS and the ratios against null measured in the same run.

Run: HF_HUB_OFFLINE=1 python bench/trainer_step.py [--repeats 3] [--modes lora full]
     HF_HUB_OFFLINE=1 python bench/trainer_step.py --scenario grpo [--repeats 2]
     HF_HUB_OFFLINE=1 python bench/trainer_step.py --scenario memory [--repeats 0]
     HF_HUB_OFFLINE=1 python bench/trainer_step.py --scenario layers [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEQUENCES = 8
LENGTH = 200
PROMPT = 40


def _traces(trainer):
    from agentcore_rl_harness.records import Trace

    rng = random.Random(0)
    drafts = [
        Trace(
            token_ids=tuple(rng.randrange(100, 49000) for _ in range(LENGTH)),
            prompt_length=PROMPT,
            loss_mask=(1,) * (LENGTH - PROMPT),
            logprobs=(0.0,) * (LENGTH - PROMPT),
            finish_reason="length",
            metadata={"policy_versions": [0]},
        )
        for _ in range(SEQUENCES)
    ]
    # the recorded logprobs are the policy's own, as if the in-process sampler had produced them
    return [
        Trace(t.token_ids, t.prompt_length, t.loss_mask, tuple(lp), t.finish_reason, t.metadata)
        for t, lp in zip(drafts, trainer.compute_logprobs(drafts))
    ]


def _groups(traces):
    from agentcore_rl_harness.trainers import TrainGroup, TrainSample

    rewards = [1.0, 0.0, 1.0, 0.0]
    return [
        TrainGroup(f"g{g}", tuple(TrainSample(f"g{g}/{i}", rewards[i], (traces[4 * g + i],)) for i in range(4)))
        for g in range(SEQUENCES // 4)
    ]


def _bare_step(model, parameters, optimizer, batch):
    import torch

    logits = model(input_ids=batch["input_ids"]).logits[:, PROMPT - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, batch["targets"].unsqueeze(-1)).squeeze(-1)
    loss = -(batch["advantages"].unsqueeze(-1) * logprobs).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_one(mode: str, runner: str, repeats: int) -> dict:
    import torch

    from agentcore_rl_harness.models import load_model, prepare_model
    from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig

    model = load_model(prepare_model("smollm2-135m-instruct"))
    trainer = LocalTrainer(model, config=LocalTrainerConfig(finetune=mode, device="cpu"))
    traces = _traces(trainer)
    groups = _groups(traces)
    times = []
    if runner == "trainer":
        for _ in range(repeats + 1):
            metrics = trainer.step_sync(groups)
            times.append(metrics.wall_time_s)
        tokens = metrics.trained_tokens
    else:
        policy = trainer.policy_model  # the LoRA-injected (or plain) transformers model
        parameters = [p for p in trainer.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=1e-4)
        advantages = [1.0, -1.0] * (SEQUENCES // 2)
        batch = {
            "input_ids": torch.tensor([t.token_ids for t in traces]),
            "targets": torch.tensor([t.token_ids[PROMPT:] for t in traces]),
            "advantages": torch.tensor(advantages),
        }
        policy.train()
        for _ in range(repeats + 1):
            start = time.perf_counter()
            _bare_step(policy, parameters, optimizer, batch)
            times.append(time.perf_counter() - start)
        tokens = SEQUENCES * (LENGTH - PROMPT)
    best = min(times[1:])
    return {
        "mode": mode,
        "runner": runner,
        "step_s": best,
        "steps_s": times,
        "trained_tokens_per_s": tokens / best,
        "trainable_parameters": trainer.trainable_parameters,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }


GRPO_GROUPS, GRPO_SAMPLES, SYSTEM, QUESTION = 4, 8, 300, 50


def _grpo_drafts():
    """Per group: one prompt; per sample: tool call (trained), tool output (not), answer (trained)."""
    from agentcore_rl_harness.records import Trace

    rng = random.Random(0)
    tokens = lambda n: [rng.randrange(100, 49000) for _ in range(n)]  # noqa: E731
    system = tokens(SYSTEM)
    drafts = []
    for _ in range(GRPO_GROUPS):
        prompt = system + tokens(QUESTION)
        for _ in range(GRPO_SAMPLES):
            call, output, answer = rng.randint(12, 18), rng.randint(28, 38), rng.randint(9, 15)
            mask = (1,) * call + (0,) * output + (1,) * answer
            drafts.append(Trace(
                token_ids=tuple(prompt + tokens(len(mask))),
                prompt_length=len(prompt),
                loss_mask=mask,
                logprobs=tuple(0.0 if m else None for m in mask),
                finish_reason="stop",
                metadata={"policy_versions": [0]},
            ))
    return drafts


def run_grpo(share: bool, repeats: int, micro_batch_tokens: int | None = None, lora_layers: int | None = None) -> dict:
    from agentcore_rl_harness.models import load_model, prepare_model
    from agentcore_rl_harness.records import Trace
    from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig, TrainGroup, TrainSample

    model = load_model(prepare_model("smollm2-135m-instruct"))
    budget = {} if micro_batch_tokens is None else {"micro_batch_tokens": micro_batch_tokens}
    config = LocalTrainerConfig(device="cpu", share_prefix=share, lora_layers=lora_layers, **budget)
    trainer = LocalTrainer(model, config=config)
    drafts = _grpo_drafts()
    started = time.perf_counter()
    recomputed = trainer.compute_logprobs(drafts)
    logprob_s = time.perf_counter() - started
    traces = [
        Trace(t.token_ids, t.prompt_length, t.loss_mask, tuple(lp), t.finish_reason, t.metadata)
        for t, lp in zip(drafts, recomputed)
    ]
    groups = [
        TrainGroup(f"g{g}", tuple(
            TrainSample(f"g{g}/{i}", float(i % 2), (traces[g * GRPO_SAMPLES + i],)) for i in range(GRPO_SAMPLES)
        ))
        for g in range(GRPO_GROUPS)
    ]
    times, losses = [], []
    for _ in range(repeats + 1):
        metrics = trainer.step_sync(groups)
        times.append(metrics.wall_time_s)
        losses.append(metrics.loss)
    return {
        "share_prefix": share,
        "micro_batch_tokens": trainer.config.micro_batch_tokens,
        "lora_layers": lora_layers,
        "trainable_parameters": trainer.trainable_parameters,
        "step_s": min(times[1:]) if repeats else times[0],
        "steps_s": times,
        "losses": losses,
        "grad_norm": metrics.grad_norm,
        "compute_logprobs_s": logprob_s,
        "tokens": sum(len(t.token_ids) for t in traces),
        "trained_tokens": metrics.trained_tokens,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }


def main_grpo(repeats: int) -> None:
    rows = {}
    for share in (False, True):
        started_load = os.getloadavg()[0]
        out = subprocess.run(
            [sys.executable, __file__, "--scenario", "grpo", "--one-share", str(int(share)), "--repeats", str(repeats)],
            capture_output=True, text=True, check=True,
        )
        rows[share] = json.loads(out.stdout.strip().splitlines()[-1])
        rows[share]["load_before"] = started_load
        print(f"share_prefix={share}: {rows[share]}", file=sys.stderr, flush=True)
    off, on = rows[False], rows[True]
    print(f"SmolLM2-135M fp32 LoRA, GRPO {GRPO_GROUPS} groups x {GRPO_SAMPLES}: {off['tokens']} tokens, "
          f"{off['trained_tokens']} trained; torch threads {__import__('torch').get_num_threads()}; "
          f"warm-up + best of {repeats}")
    print(f"{'share_prefix':12} {'step s':>8} {'peak RSS GB':>12} {'loss':>10} {'load':>6}")
    for share, row in rows.items():
        print(f"{str(share):12} {row['step_s']:8.2f} {row['peak_rss_gb']:12.2f} {row['losses'][0]:10.6f} "
              f"{row['load_before']:6.2f}")
    print(f"speed-up off / on = {off['step_s'] / on['step_s']:.2f}x")


MEMORY_BUDGETS = (4096, 1024)
LORA_LAYERS = (None, 15)


def _one_process_each(flag: str, values: tuple, repeats: int) -> dict:
    """Each value's GRPO step in its own process (`--scenario X --one-value V`), so peak RSS is its own."""
    rows = {}
    for value in values:
        load = os.getloadavg()[0]
        out = subprocess.run(
            [sys.executable, __file__, "--scenario", flag, "--one-value", json.dumps(value), "--repeats", str(repeats)],
            capture_output=True, text=True, check=True,
        )
        rows[value] = {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": load}
        print(f"{flag}={value}: {rows[value]}", file=sys.stderr, flush=True)
    return rows


def _print_ratios(label: str, rows: dict, repeats: int) -> None:
    base = next(iter(rows.values()))
    print(f"SmolLM2-135M fp32 LoRA, share_prefix on, GRPO {GRPO_GROUPS} groups x {GRPO_SAMPLES}: "
          f"{base['tokens']} tokens, {base['trained_tokens']} trained; best of {max(repeats, 1)}")
    print(f"{label:>18} {'step s':>8} {'peak RSS GB':>12} {'RSS ratio':>10} {'time ratio':>11} {'loss':>10} {'load':>6}")
    for value, row in rows.items():
        print(f"{str(value):>18} {row['step_s']:8.2f} {row['peak_rss_gb']:12.2f} "
              f"{row['peak_rss_gb'] / base['peak_rss_gb']:10.2f} {row['step_s'] / base['step_s']:11.2f} "
              f"{row['losses'][0]:10.6f} {row['load_before']:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="best of N (the CPU may be shared)")
    parser.add_argument("--modes", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    parser.add_argument("--scenario", choices=["bare", "grpo", "memory", "layers"], default="bare")
    parser.add_argument("--one-value", type=json.loads, help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, metavar=("MODE", "RUNNER"), help=argparse.SUPPRESS)
    parser.add_argument("--one-share", type=int, choices=[0, 1], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario in ("memory", "layers"):
        key, values, label = {
            "memory": ("micro_batch_tokens", MEMORY_BUDGETS, "micro_batch_tokens"),
            "layers": ("lora_layers", LORA_LAYERS, "lora_layers"),
        }[args.scenario]
        if args.one_value is not None or "--one-value" in sys.argv:
            print(json.dumps(run_grpo(True, args.repeats, **{key: args.one_value})))
        else:
            _print_ratios(label, _one_process_each(args.scenario, values, args.repeats), args.repeats)
        return
    if args.scenario == "grpo":
        if args.one_share is not None:
            print(json.dumps(run_grpo(bool(args.one_share), args.repeats)))
        else:
            main_grpo(args.repeats)
        return
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.repeats)))
        return

    rows = {}
    for mode in args.modes:
        for runner in ("bare", "trainer"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", mode, runner, "--repeats", str(args.repeats)],
                capture_output=True, text=True, check=True,
            )
            rows[mode, runner] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{mode} {runner}: {rows[mode, runner]['steps_s']}", file=sys.stderr, flush=True)
    print(f"SmolLM2-135M fp32, {SEQUENCES} x {LENGTH} tokens ({LENGTH - PROMPT} trained each), "
          f"torch threads {__import__('torch').get_num_threads()}, best of {args.repeats}")
    print(f"{'mode':6} {'runner':8} {'step s':>8} {'tok/s':>8} {'peak RSS GB':>12} {'params':>12}")
    for (mode, runner), row in rows.items():
        print(f"{mode:6} {runner:8} {row['step_s']:8.2f} {row['trained_tokens_per_s']:8.1f} "
              f"{row['peak_rss_gb']:12.2f} {row['trainable_parameters']:12,}")
    for mode in args.modes:
        ratio = rows[mode, "trainer"]["step_s"] / rows[mode, "bare"]["step_s"]
        print(f"{mode}: trainer / bare = {ratio:.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()
