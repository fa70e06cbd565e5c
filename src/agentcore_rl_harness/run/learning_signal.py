"""Signal accounting of a training step: did its rollouts give GRPO anything to learn from?

A GRPO group teaches only when its samples' rewards differ. A step whose groups were all
constant (every sample failed, or every one succeeded), too small, or left out (timeouts, agent
and task errors) trains nothing, and the run must say so, with why and what to change, instead
of printing `loss n/a`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from ..records import Rollout
from ..trainers.grpo import EXCLUDED_STATUSES, training_reward

# What raises a task's learning signal, in the order a user should try them.
LEVERS = (
    "warm up from the task's oracle first: --agentcore-rl-set warmup.enabled=true "
    "(warmup.source=oracle; the task needs an oracle)",
    "sample more varied replies: --agentcore-rl-set sampling.temperature=1.2",
    "more samples per group: --agentcore-rl-set algo.group_size=8 (or @arl.task(samples=8))",
    "give partial credit: @arl.reward functions that return fractions (a valid format, the right "
    "tool) instead of one pass/fail reward",
)


def step_signal(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """Per step: how many groups could teach (`informative_groups` of `groups_total`, their
    fraction), how many were constant or too small, and the mean within-group reward spread
    (population std of the training rewards of each group with two or more samples)."""
    rewards: dict[str, list[float]] = {}
    for rollout in rollouts:
        rewards.setdefault(rollout.group_id, [])
        if rollout.status not in EXCLUDED_STATUSES:
            rewards[rollout.group_id].append(training_reward(rollout))
    spreads = [statistics.pstdev(values) for values in rewards.values() if len(values) >= 2]
    small = sum(1 for values in rewards.values() if len(values) < 2)
    constant = sum(1 for values in rewards.values() if len(values) >= 2 and max(values) == min(values))
    informative = len(rewards) - small - constant
    return {
        "groups_total": len(rewards),
        "informative_groups": informative,
        "informative_fraction": round(informative / len(rewards), 4) if rewards else None,
        "constant_groups": constant,
        "small_groups": small,
        "reward_spread": round(statistics.fmean(spreads), 6) if spreads else None,
    }


def idle_reason(line: dict[str, Any]) -> str:
    """Why a step trained nothing, from its steps.jsonl line."""
    parts = []
    constant, small = line.get("constant_groups", 0), line.get("small_groups", 0)
    if constant:
        reward = line.get("reward_mean")
        same = f" (every sample's reward was {reward:.3g})" if reward is not None and not small else ""
        parts.append(f"{constant} of {line['groups_total']} group(s) had the same reward for every "
                     f"sample{same}, so GRPO's advantages are all 0")
    if small:
        left_out = {status: count for status, count in line.get("excluded", {}).items() if count}
        why = f"; left out: {left_out}" if left_out else ""
        parts.append(f"{small} group(s) kept fewer than 2 scored samples{why}")
    return "; ".join(parts) or "no rollout reached the trainer"


def idle_warning(line: dict[str, Any], *, streak: int, total_steps: int) -> str:
    """The message for a step that trained 0 tokens; from the second in a row on, loudly."""
    step = line["step"]
    head = (f"agentcore-rl WARNING: training step {step}/{total_steps} trained nothing "
            f"(0 tokens): {idle_reason(line)}.")
    levers = "\n".join(f"  - {lever}" for lever in LEVERS)
    if streak < 2:
        return f"{head} To give GRPO a signal:\n{levers}"
    bar = "!" * 78
    return (f"{bar}\n{head}\nThat is {streak} steps in a row without an update: the policy has not "
            f"changed and the post-eval will match the pre-eval. To give GRPO a signal:\n{levers}\n{bar}")
