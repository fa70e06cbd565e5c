"""Turn rollout records into the report model (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import Rollout, Status
from .model import (
    Delta, DeltaReport, Interval, MeanInterval, Outcome, PhaseReport, Report, RoleUsage, RunInfo, Summary,
    Tokens, TrainingSummary, TrainStep,
)
from .stats import (
    bootstrap_mean_interval, mcnemar_exact, paired_bootstrap, pass_at_k, pass_hat_k,
    wilson_interval,
)

RolloutKey = tuple[str, str, int, str, "int | None"]


# Statuses left out of success counts: the harness or the task's own code failed, not the agent.
UNCOUNTED = (Status.INFRA_ERROR, Status.TASK_ERROR, Status.JUDGE_ERROR)

def rollout_key(rollout: Rollout) -> RolloutKey:
    """What makes a rollout unique in a run: a retry of the same key replaces the earlier one."""
    return (rollout.task, rollout.row_id, rollout.sample_index, rollout.phase, rollout.step)


def deduplicate(
    rollouts: Sequence[Rollout], discarded: Sequence[Rollout] = (),
) -> tuple[list[Rollout], set[RolloutKey]]:
    """The last record of each key, and the keys that ran more than once (retried).

    `discarded` are earlier attempts that a resume moved out of rollouts.jsonl.
    """
    last: dict[RolloutKey, Rollout] = {}
    seen: dict[RolloutKey, int] = defaultdict(int)
    for rollout in discarded:
        seen[rollout_key(rollout)] += 1
    for rollout in rollouts:
        key = rollout_key(rollout)
        seen[key] += 1
        last.pop(key, None)
        last[key] = rollout
    retried = {key for key, count in seen.items() if count > 1 and key in last}
    return list(last.values()), retried


def _counted(rollouts: Sequence[Rollout]) -> list[Rollout]:
    return [r for r in rollouts if r.status not in UNCOUNTED]


def _mean_interval(values: Sequence[float], seed: int) -> MeanInterval:
    bounds = bootstrap_mean_interval(values, seed=seed)
    return MeanInterval(
        value=sum(values) / len(values) if values else None,
        ci_low=bounds[0] if bounds else None,
        ci_high=bounds[1] if bounds else None,
        n=len(values),
    )


def summarize(
    rollouts: Sequence[Rollout], *, retried: set[RolloutKey] = frozenset(), seed: int = 0,
) -> Summary:
    counted = _counted(rollouts)
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

    def over_rows(estimator) -> dict[str, float]:
        return {
            str(k): sum(estimator(len(v), sum(v), k) for v in by_row.values()) / len(by_row)
            for k in range(1, k_max + 1)
        }

    rewards = [r.reward for r in counted if r.reward is not None]
    names = sorted({name for r in counted for name in r.rewards})
    by_name = {name: [r.rewards[name] for r in counted if name in r.rewards] for name in names}
    prompt = sum(r.usage.prompt_tokens for r in rollouts)
    completion = sum(r.usage.completion_tokens for r in rollouts)
    elapsed = sum(r.elapsed_s for r in rollouts)
    return Summary(
        rollouts=len(rollouts),
        rows=len({(r.task, r.row_id) for r in rollouts}),
        samples_per_row=k_max,
        success_rate=Interval(
            value=successes / len(counted) if counted else None, ci_low=low, ci_high=high,
            n=len(counted),
        ),
        mean_reward=_mean_interval(rewards, seed),
        reward_means={name: _mean_interval(values, seed) for name, values in by_name.items()},
        pass_at_k=over_rows(pass_at_k),
        pass_hat_k=over_rows(pass_hat_k),
        failures=dict(sorted(failures.items())),
        tokens=Tokens(prompt=prompt, completion=completion, total=prompt + completion),
        sessions=len({r.session_id for r in rollouts if r.session_id}),
        turns=sum(r.turns for r in rollouts),
        elapsed_s=round(elapsed, 3),
        mean_elapsed_s=round(elapsed / len(rollouts), 3) if rollouts else None,
        retried=sum(1 for r in rollouts if rollout_key(r) in retried),
    )


def _group(rollouts: Sequence[Rollout], keys_of) -> dict[str, list[Rollout]]:
    grouped: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        for key in keys_of(r):
            grouped[key].append(r)
    return dict(sorted(grouped.items()))


def summarize_by_task(rollouts: Sequence[Rollout], **options: Any) -> dict[str, Summary]:
    return {task: summarize(items, **options)
            for task, items in _group(rollouts, lambda r: [r.task]).items()}


def summarize_by_tag(
    rollouts: Sequence[Rollout], tags: Mapping[str, Sequence[str]], **options: Any,
) -> dict[str, Summary]:
    grouped = _group(rollouts, lambda r: tags.get(r.task, ()))
    return {tag: summarize(items, **options) for tag, items in grouped.items()}


def paired_delta(
    pre: Sequence[Rollout | Outcome], post: Sequence[Rollout | Outcome], *, seed: int = 0,
) -> Delta:
    """Pair by (task, row, sample): exact McNemar on success, paired bootstrap on reward."""
    def usable(items):
        return {(r.task, r.row_id, r.sample_index): r for r in items
                if _status(r) not in {s.value for s in UNCOUNTED}}

    before, after = usable(pre), usable(post)
    keys = sorted(before.keys() & after.keys())
    pre_ok = [bool(before[k].success) for k in keys]
    post_ok = [bool(after[k].success) for k in keys]
    improved = sum(1 for a, b in zip(pre_ok, post_ok) if not a and b)
    regressed = sum(1 for a, b in zip(pre_ok, post_ok) if a and not b)
    differences = [
        after[k].reward - before[k].reward for k in keys
        if before[k].reward is not None and after[k].reward is not None
    ]
    bootstrap = paired_bootstrap(differences, seed=seed)
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
        reward_pairs=len(differences),
        reward_delta=sum(differences) / len(differences) if differences else None,
        reward_ci_low=bootstrap[0] if bootstrap else None,
        reward_ci_high=bootstrap[1] if bootstrap else None,
        reward_p_value=bootstrap[2] if bootstrap else None,
    )


def _status(item: Rollout | Outcome) -> str:
    return item.status.value if isinstance(item, Rollout) else item.status


def paired_report(
    pre: Sequence[Rollout | Outcome], post: Sequence[Rollout | Outcome],
    tags: Mapping[str, Sequence[str]], *, seed: int = 0,
) -> DeltaReport:
    tasks = sorted({r.task for r in [*pre, *post]})
    tag_names = sorted({tag for task in tasks for tag in tags.get(task, ())})

    def having(items, predicate):
        return [r for r in items if predicate(r.task)]

    return DeltaReport(
        overall=paired_delta(pre, post, seed=seed),
        tasks={
            task: paired_delta(having(pre, task.__eq__), having(post, task.__eq__), seed=seed)
            for task in tasks
        },
        tags={
            tag: paired_delta(
                having(pre, lambda t: tag in tags.get(t, ())),
                having(post, lambda t: tag in tags.get(t, ())), seed=seed,
            )
            for tag in tag_names
        },
    )


def _phase(rollouts: Sequence[Rollout], phase: str) -> list[Rollout]:
    return [r for r in rollouts if r.phase == phase]


def _phase_report(rollouts, tags, **options) -> PhaseReport:
    return PhaseReport(
        overall=summarize(rollouts, **options),
        tasks=summarize_by_task(rollouts, **options),
        tags=summarize_by_tag(rollouts, tags, **options),
    )


def outcomes(rollouts: Sequence[Rollout], retried: set[RolloutKey] = frozenset()) -> list[Outcome]:
    return [
        Outcome(task=r.task, row_id=r.row_id, sample_index=r.sample_index, status=r.status.value,
                success=r.success, reward=r.reward, retried=rollout_key(r) in retried)
        for r in sorted(rollouts, key=lambda r: (r.task, r.row_id, r.sample_index))
    ]


def build_report(
    *, run_id: str, mode: str, config: dict[str, Any], overrides: Sequence[str],
    versions: dict[str, str], git_sha: str | None, started_at: str, wall_time_s: float,
    rollouts: Sequence[Rollout], item_phase: str, train_steps: Sequence[dict[str, Any]] = (),
    tags: Mapping[str, Sequence[str]] | None = None, discarded: Sequence[Rollout] = (),
    roles: Mapping[str, Mapping[str, Any]] | None = None, recipe: dict[str, Any] | None = None,
) -> Report:
    """The report of one run. `tags` maps task -> its tags; `discarded` are earlier attempts
    (rollouts.discarded.jsonl) that make their redone rollouts count as retried. Bootstrap
    intervals are seeded with the config's `seed`, so re-rendering gives the same numbers."""
    tags = {task: list(values) for task, values in (tags or {}).items()}
    unique, retried = deduplicate(rollouts, discarded)
    options = {"retried": retried, "seed": int(config.get("seed") or 0)}
    items = _phase(unique, item_phase)
    report = Report(
        run=RunInfo(
            id=run_id, mode=mode, config=config, overrides=list(overrides),
            versions=versions, git_sha=git_sha, started_at=started_at, wall_time_s=wall_time_s,
        ),
        overall=summarize(items, **options),
        tasks=summarize_by_task(items, **options),
        tags=summarize_by_tag(items, tags, **options),
        task_tags={task: values for task, values in sorted(tags.items()) if values},
        outcomes=outcomes(items, retried),
        roles={role: RoleUsage(**usage) for role, usage in (roles or {}).items()},
        recipe=recipe,
    )
    if mode == "run":
        pre, post = _phase(unique, "pre"), _phase(unique, "post")
        report.pre = _phase_report(pre, tags, **options)
        report.post = _phase_report(post, tags, **options)
        report.delta = paired_report(pre, post, tags, seed=options["seed"])
        warm = _phase(unique, "warmup")
        if warm:  # pre -> after the warm-up -> after RL, each step paired
            report.warmup = _phase_report(warm, tags, **options)
            report.warmup_delta = paired_report(pre, warm, tags, seed=options["seed"])
            report.rl_delta = paired_report(warm, post, tags, seed=options["seed"])
    if train_steps:
        report.train = [
            TrainStep(step=line["step"], reward_mean=line.get("reward_mean"),
                      success_rate=line.get("success_rate"), loss=line.get("loss"),
                      trained_tokens=line.get("trained_tokens"), informative_fraction=_informative(line)[2],
                      reward_spread=line.get("reward_spread"), kl_initial=line.get("kl_initial"),
                      clip_fraction=line.get("clip_fraction"), sync_s=line.get("sync_s"),
                      adapted=[f"{c['key']}={c['value']}" for c in line.get("recipe") or [] if c.get("applied")],
                      **_async_counts(line))
            for line in train_steps
        ]
        report.training = training_summary(train_steps)
    return report


def _informative(line: dict[str, Any]) -> tuple[int, int, float | None]:
    """(informative groups, all groups, fraction) of a steps.jsonl line (older lines: from the
    trainer's groups / groups_skipped)."""
    if "informative_groups" in line:
        informative, total = int(line["informative_groups"]), int(line.get("groups_total") or 0)
    else:
        informative = int(line.get("groups") or 0)
        total = informative + int(line.get("groups_skipped") or 0)
    return informative, total, (round(informative / total, 4) if total else None)


def training_summary(train_steps: Sequence[dict[str, Any]]) -> TrainingSummary:
    counts = [_informative(line) for line in train_steps]
    informative, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return TrainingSummary(
        steps=len(train_steps),
        effective_steps=sum(1 for line in train_steps if line.get("trained_tokens")),
        informative_group_fraction=round(informative / total, 4) if total else None,
        trained_tokens=sum(int(line.get("trained_tokens") or 0) for line in train_steps),
        dropped_stale=sum(line["async"]["dropped_stale"] for line in train_steps)
        if any("async" in line for line in train_steps) else None,
        cut_stragglers=sum(line["async"].get("cut_stragglers", 0) for line in train_steps)
        if any("async" in line for line in train_steps) else None,
    )


def _async_counts(line: dict[str, Any]) -> dict[str, Any]:
    """An async step line's staleness counters (`run/async_loop.py`); none for a sync step."""
    counters = line.get("async")
    if not counters:
        return {}
    return {"dropped_stale": counters["dropped_stale"], "paced_starts": counters["paced_starts"],
            "cut_stragglers": counters.get("cut_stragglers", 0), "staleness": counters["staleness"]}
