"""Turn rollout records into the report model (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from typing import Any

from ..records import Rollout, Status
from .model import (
    Delta, DeltaReport, Interval, PhaseReport, Report, RunInfo, Summary, Tokens, TrainStep,
)
from .stats import mcnemar_exact, mean, pass_at_k, wilson_interval


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


def paired_delta(pre: Sequence[Rollout], post: Sequence[Rollout]) -> Delta:
    """Pair rollouts by (task, row, sample) and test the change in success (exact McNemar)."""
    counted = (Status.INFRA_ERROR,)
    before = {(r.task, r.row_id, r.sample_index): r for r in pre if r.status not in counted}
    after = {(r.task, r.row_id, r.sample_index): r for r in post if r.status not in counted}
    keys = sorted(before.keys() & after.keys())
    pre_ok = [bool(before[k].success) for k in keys]
    post_ok = [bool(after[k].success) for k in keys]
    improved = sum(1 for a, b in zip(pre_ok, post_ok) if not a and b)
    regressed = sum(1 for a, b in zip(pre_ok, post_ok) if a and not b)
    reward_pairs = [
        (before[k].reward, after[k].reward) for k in keys
        if before[k].reward is not None and after[k].reward is not None
    ]
    pre_rate = sum(pre_ok) / len(keys) if keys else None
    post_rate = sum(post_ok) / len(keys) if keys else None
    return Delta(
        pre=pre_rate,
        post=post_rate,
        delta=None if pre_rate is None or post_rate is None else post_rate - pre_rate,
        pairs=len(keys),
        improved=improved,
        regressed=regressed,
        p_value=mcnemar_exact(improved, regressed),
        reward_delta=mean([b - a for a, b in reward_pairs]),
    )


def _phase(rollouts: Sequence[Rollout], phase: str) -> list[Rollout]:
    return [r for r in rollouts if r.phase == phase]


def build_report(
    *, run_id: str, mode: str, config: dict[str, Any], overrides: Sequence[str], versions: dict[str, str], git_sha: str | None,
    started_at: str, wall_time_s: float, rollouts: Sequence[Rollout], item_phase: str,
    train_steps: Sequence[dict[str, Any]] = (),
) -> Report:
    items = _phase(rollouts, item_phase)
    report = Report(
        run=RunInfo(
            id=run_id, mode=mode, config=config, overrides=list(overrides),
            versions=versions, git_sha=git_sha, started_at=started_at, wall_time_s=wall_time_s,
        ),
        overall=summarize(items),
        tasks=summarize_by_task(items),
    )
    if mode == "run":
        pre, post = _phase(rollouts, "pre"), _phase(rollouts, "post")
        tasks = sorted({r.task for r in [*pre, *post]})
        report.pre = PhaseReport(overall=summarize(pre), tasks=summarize_by_task(pre))
        report.post = PhaseReport(overall=summarize(post), tasks=summarize_by_task(post))
        report.delta = DeltaReport(
            overall=paired_delta(pre, post),
            tasks={
                task: paired_delta([r for r in pre if r.task == task],
                                   [r for r in post if r.task == task])
                for task in tasks
            },
        )
    if train_steps:
        report.train = [
            TrainStep(step=line["step"], reward_mean=line.get("reward_mean"),
                      success_rate=line.get("success_rate"), loss=line.get("loss"))
            for line in train_steps
        ]
    return report
