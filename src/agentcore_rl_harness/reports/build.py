"""Turn rollout records into the report model (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..records import Rollout, Status
from .model import Interval, Summary, Tokens
from .stats import mean, pass_at_k, wilson_interval


def summarize(rollouts: Sequence[Rollout]) -> Summary:
    counted = [r for r in rollouts if r.status is not Status.INFRA_ERROR]
    successes = sum(1 for r in counted if r.success)
    low, high = wilson_interval(successes, len(counted))
    failures: dict[str, int] = defaultdict(int)
    for r in rollouts:
        if r.status is not Status.COMPLETED:
            failures[r.status.value] += 1
    by_row: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for r in counted:
        by_row[(r.task, r.row_id)].append(bool(r.success))
    k_max = min((len(v) for v in by_row.values()), default=0)
    pass_k = {
        str(k): sum(pass_at_k(len(v), sum(v), k) for v in by_row.values()) / len(by_row)
        for k in range(1, k_max + 1)
    }
    rewards = [r.reward for r in counted if r.reward is not None]
    return Summary(
        rollouts=len(rollouts),
        rows=len({(r.task, r.row_id) for r in rollouts}),
        success_rate=Interval(
            value=successes / len(counted) if counted else None,
            ci_low=low,
            ci_high=high,
            n=len(counted),
        ),
        mean_reward=mean(rewards),
        pass_at_k=pass_k,
        failures=dict(sorted(failures.items())),
        tokens=Tokens(
            prompt=sum(r.usage.prompt_tokens for r in rollouts),
            completion=sum(r.usage.completion_tokens for r in rollouts),
        ),
        elapsed_s=round(sum(r.elapsed_s for r in rollouts), 3),
    )


def summarize_by_task(rollouts: Sequence[Rollout]) -> dict[str, Summary]:
    grouped: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        grouped[r.task].append(r)
    return {task: summarize(items) for task, items in sorted(grouped.items())}
