"""Text pieces shared by every report format: numbers, verdict lines, the paired-delta table."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import Status
from .model import Delta, Report, Summary


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}pp"


def md_cell(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def verdict(summary: Summary) -> str:
    rate = summary.success_rate
    return (
        f"{pct(rate.value)} success ({rate.n} rollouts, 95% CI "
        f"{pct(rate.ci_low)}–{pct(rate.ci_high)})"
    )


def delta_line(delta: Delta) -> str:
    if delta.delta is None:
        return "no paired rollouts"
    line = (
        f"{pct(delta.pre)} -> {pct(delta.post)} ({pp(delta.delta)}, "
        f"{delta.pairs} pairs, {delta.improved} improved / {delta.regressed} regressed, "
        f"McNemar p={delta.p_value:.3g})"
    )
    if delta.reward_p_value is not None:
        line += f"; reward {delta.reward_delta:+.3f} (bootstrap p={delta.reward_p_value:.3g})"
    return line


def verdict_line(report: Report) -> str:
    """One line a reviewer reads first: the headline, the change, failed gates."""
    parts = [verdict(report.overall)]
    if report.delta is not None:
        overall = report.delta.overall
        if overall.delta is None:
            parts.append("no paired pre/post rollouts")
        else:
            significant = "significant" if overall.p_value < 0.05 else "not significant"
            parts.append(f"{pp(overall.delta)} vs pre-training ({significant}, "
                         f"p={overall.p_value:.3g})")
    if report.gates:
        parts.append(f"{len(report.gates)} gate(s) FAILED")
    infra = report.overall.failures.get(Status.INFRA_ERROR.value, 0)
    if infra:
        parts.append(f"{infra} infrastructure error(s)")
    task_errors = report.overall.failures.get(Status.TASK_ERROR.value, 0)
    if task_errors:
        parts.append(f"{task_errors} task_error(s): bugs in the task's own code, not counted")
    judge_errors = report.overall.failures.get(Status.JUDGE_ERROR.value, 0)
    if judge_errors:
        parts.append(f"{judge_errors} judge_error(s): the judge model gave no usable score, not counted")
    return "; ".join(parts)


def delta_table(rows: Sequence[tuple[str, Delta]], *, before: str, after: str) -> list[str]:
    """The markdown table of paired deltas (run mode's pre/post, or `report compare`'s A/B)."""
    lines = [
        f"| task | {before} | {after} | delta | pairs | improved / regressed | p (McNemar) "
        "| reward delta [95% CI] | p (bootstrap) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, delta in rows:
        reward = "n/a" if delta.reward_delta is None else (
            f"{delta.reward_delta:+.3f} [{num(delta.reward_ci_low)}, {num(delta.reward_ci_high)}]")
        reward_p = "n/a" if delta.reward_p_value is None else f"{delta.reward_p_value:.3g}"
        lines.append(
            f"| {md_cell(name)} | {pct(delta.pre)} | {pct(delta.post)} | {pp(delta.delta)} | "
            f"{delta.pairs} | {delta.improved} / {delta.regressed} | {delta.p_value:.3g} | "
            f"{reward} | {reward_p} |"
        )
    return lines


def training_banner(report: Report) -> str | None:
    """The line a report opens with when training steps changed nothing (None when all trained)."""
    training = report.training
    if training is None or not training.steps or training.effective_steps == training.steps:
        return None
    share = pct(training.informative_group_fraction)
    levers = ("warm up from an oracle (warmup.enabled=true), a higher sampling.temperature, more "
              "samples per group (algo.group_size), partial-credit rewards")
    if training.effective_steps == 0:
        return (f"TRAINING CHANGED NOTHING: 0 of {training.steps} steps trained a token ({share} of "
                "groups had rewards that differed; GRPO learns only from those), so the policy "
                f"after training is the initial one. Levers: {levers}.")
    return (f"Only {training.effective_steps} of {training.steps} training steps trained anything "
            f"({share} of groups had rewards that differed). Levers: {levers}.")


def interrupted_banner(report: Report) -> str | None:
    """The line a report of a stopped run opens with: what is on disk and how to go on."""
    stopped = report.interrupted
    if stopped is None:
        return None
    phases = ", ".join(f"{phase} {count}" for phase, count in stopped.by_phase.items()) or "none"
    checkpoint = f", newest checkpoint {stopped.checkpoint}" if stopped.checkpoint else ""
    return (f"INTERRUPTED: the run was stopped before it finished; {stopped.rollouts_on_disk} "
            f"rollouts are on disk ({phases}), {stopped.train_steps} training step(s) done"
            f"{checkpoint}. The numbers below cover only what finished. Resume with: {stopped.resume}")


def budget_note(report: Report) -> str | None:
    """The line a report opens with when the time budget stopped training early (recipe.json's
    `trainer.steps` choice; None otherwise)."""
    stops = [c for c in (report.recipe or {}).get("choices") or [] if c.get("key") == "trainer.steps" and c.get("applied")]
    if not stops:
        return None
    trainer = report.run.config.get("trainer")
    planned = trainer.get("steps") if isinstance(trainer, dict) else None
    then = ", then the post-evaluation ran" if report.run.mode == "run" else ""
    return (f"Training stopped early for the time budget: {stops[-1]['value']} of {planned} trainer.steps "
            f"trained{then} ({stops[-1].get('reason', '')}).")
