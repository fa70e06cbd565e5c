"""report.md: the headline, the per-task table, deltas, failures and training steps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..records import Rollout
from .baseline import baseline_section, hosted_note
from .model import Report
from .text import budget_note, delta_table, interrupted_banner, md_cell, num, pct, pp, training_banner, verdict_line
from .tokenizer import Tokenizer
from .transcript import excerpt

FAILED_EXCERPTS = 10  # failed rollouts excerpted in report.md; report.html has every transcript


def _rewards_section(report: Report) -> list[str]:
    from .html import reward_rows

    rows = reward_rows(report)
    if not rows:
        return []
    lines = ["", "## Reward functions (mean [95% CI], n)", "", "| phase | task | reward function | mean [95% CI] | n |",
             "|---|---|---|---|---|"]
    lines += [f"| {row.phase} | {md_cell(row.task)} | {md_cell(row.name)} | {row.mean} | {row.n} |" for row in rows]
    return lines


def _failed_section(rollouts: Sequence[Rollout], tokenizer: Tokenizer | None) -> list[str]:
    failed = [r for r in rollouts if r.success is False or r.status.value != "completed"]
    if not failed:
        return []
    lines = ["", f"## Failed rollouts ({len(failed)}; first {min(len(failed), FAILED_EXCERPTS)}, "
                 "full transcripts in report.html)", ""]
    for rollout in failed[:FAILED_EXCERPTS]:
        rewards = ", ".join(f"{name} {value:.3g}" for name, value in rollout.rewards.items())
        why = next((line.strip() for line in (rollout.error or "").splitlines() if line.strip()), "")
        lines.append(f"- **{md_cell(rollout.task)} / {md_cell(rollout.row_id)} / sample {rollout.sample_index}** "
                     f"({rollout.phase}): `{rollout.status.value}`, reward {num(rollout.reward)}"
                     + (f" ({md_cell(rewards)})" if rewards else "") + (f" — {md_cell(why[:200])}" if why else ""))
        for line in (excerpt(rollout, tokenizer) if tokenizer and tokenizer.found else []):
            lines.append(f"  - {md_cell(line)}")
        if not (tokenizer and tokenizer.found) and rollout.result is not None:
            lines.append(f"  - result: `{md_cell(str(rollout.result)[:200])}`")
    return lines


def _delta_section(report: Report) -> list[str]:
    if report.delta is None:
        return []
    sections = [("Before and after training", report.delta, "pre", "post")]
    if report.warmup_delta is not None and report.rl_delta is not None:
        sections += [("Before and after the supervised warm-up", report.warmup_delta, "pre", "warm-up"),
                     ("After the warm-up and after RL (RL's own lift)", report.rl_delta, "warm-up", "post")]
    lines = []
    for title, deltas, before, after in sections:
        rows = [*deltas.tasks.items(), *((f"tag:{tag}", delta) for tag, delta in deltas.tags.items()),
                ("**overall**", deltas.overall)]
        lines += ["", f"## {title} (paired by task, row and sample)", "",
                  *delta_table(rows, before=before, after=after)]
    return lines


def _recipe_section(report: Report) -> list[str]:
    """recipe=auto's choices, one line each with its reason (RUN_DIR/recipe.json)."""
    choices = (report.recipe or {}).get("choices") or []
    if not choices:
        return []
    lines = ["", "## Recipe (recipe=auto)", ""]
    for choice in choices:
        verb = "=" if choice.get("applied") else "stays"
        lines.append(f"- {md_cell(choice.get('at', ''))}: `{choice['key']}` {verb} `{md_cell(repr(choice['value']))}`: "
                     f"{md_cell(choice.get('reason', ''))}")
    return lines


def _train_section(report: Report) -> list[str]:
    if not report.train:
        return []
    lines = ["", "## Training reward per step, with its signal", "",
             "| step | reward | success | loss | informative groups | tokens trained | weight sync s | "
             "reward spread | KL to initial | clipped | recipe |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for step in report.train:
        tokens = "n/a" if step.trained_tokens is None else str(step.trained_tokens)
        lines.append(f"| {step.step} | {num(step.reward_mean)} | {pct(step.success_rate)} | "
                     f"{num(step.loss, 4)} | {pct(step.informative_fraction)} | {tokens} | {num(step.sync_s)} | "
                     f"{num(step.reward_spread)} | {num(step.kl_initial, 4)} | {pct(step.clip_fraction)} | "
                     f"{md_cell(', '.join(step.adapted)) or '—'} |")
    async_steps = [step for step in report.train if step.staleness is not None]
    if async_steps:
        lags: dict[str, int] = {}
        for step in async_steps:
            for lag, count in (step.staleness or {}).items():
                lags[lag] = lags.get(lag, 0) + count
        cut = sum(s.cut_stragglers or 0 for s in async_steps)
        cut_text = f", {cut} stragglers cut from partial groups (never trained)" if cut else ""
        lines += ["", f"Async training: {sum(s.dropped_stale or 0 for s in async_steps)} samples dropped as "
                  f"stale{cut_text}, {sum(s.paced_starts or 0 for s in async_steps)} group starts paced; trained "
                  "samples by staleness (versions behind): "
                  + ", ".join(f"{lag}: {lags[lag]}" for lag in sorted(lags, key=int))]
    return lines


def _failures_section(report: Report) -> list[str]:
    if not report.overall.failures and not report.overall.retried and not report.gates:
        return []
    lines = ["", "## Failures", ""]
    for status, count in report.overall.failures.items():
        lines.append(f"- `{status}`: {count} of {report.overall.rollouts} rollouts")
    if report.overall.retried:
        lines.append(f"- retried rollouts: {report.overall.retried}")
    for gate in report.gates:
        lines.append(f"- gate FAILED: {md_cell(gate.message)}")
    return lines


def _roles_section(report: Report) -> list[str]:
    """Usage per model role, shown when a role besides the policy was asked (a judge)."""
    if set(report.roles) <= {"policy"}:
        return []
    lines = ["", "## Usage by role", "", "| role | calls | cached | failed attempts | judge errors | "
             "prompt tokens | completion tokens | cost (USD) |", "|---|---|---|---|---|---|---|---|"]
    for role, usage in report.roles.items():
        cost = "—" if usage.cost_usd is None else f"{usage.cost_usd:.4f}"
        lines.append(f"| {md_cell(role)} | {usage.calls} | {usage.cached} | {usage.failed_attempts} | "
                     f"{usage.judge_errors} | {usage.prompt_tokens} | {usage.completion_tokens} | {cost} |")
    return lines


def _files_line(report: Report, files_at: Path | None) -> str:
    names = ["report.html", "rollouts.jsonl", "report.json", "junit.xml", "config.yaml"]
    if report.train:
        names.append("train/steps.jsonl")
    if files_at is None:  # report.md beside the files: relative links work
        return "Files: " + " · ".join(f"[{name}]({name})" for name in names)
    return f"Files ({', '.join(names)}) are in the run directory `{files_at}`, not linked here."


def render_markdown(report: Report, *, files_at: Path | None = None, rollouts: Sequence[Rollout] = (),
                    tokenizer: Tokenizer | None = None) -> str:
    """report.md; with `files_at` (a page away from the files, e.g. GitHub's step summary, where
    relative links are dead) the files are named with the run directory's path instead of linked."""
    model = report.run.config.get("model", {})
    model_name = model.get("name") if isinstance(model, dict) else model
    banners = [text for text in (interrupted_banner(report), training_banner(report)) if text]
    lines = [
        f"# agentcore-rl {report.run.mode} report — {md_cell(report.run.id)}",
        "",
        *(line for text in banners for line in (f"> **WARNING** {md_cell(text)}", "")),
        *((f"> **NOTE** {md_cell(note)}", "") if (note := hosted_note(report)) else ()),
        *((f"> **NOTE** {md_cell(note)}", "") if (note := budget_note(report)) else ()),
        f"**{verdict_line(report)}**",
        "",
        f"Model `{model_name}`, wall time {report.run.wall_time_s:.1f}s, "
        f"{report.overall.sessions} sessions, {report.overall.tokens.total} tokens.",
        "",
        "| task | success | 95% CI | n | mean reward [95% CI] | pass@1 | pass^k | delta | failures |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    deltas = report.delta.tasks if report.delta else {}
    rows = [*report.tasks.items(), *((f"tag:{tag}", s) for tag, s in report.tags.items()),
            ("**overall**", report.overall)]
    for name, summary in rows:
        rate, reward = summary.success_rate, summary.mean_reward
        failures = ", ".join(f"{k}: {v}" for k, v in summary.failures.items()) or "—"
        reward_text = "n/a" if reward.value is None else (
            f"{reward.value:.3f} [{num(reward.ci_low)}, {num(reward.ci_high)}]")
        k = str(summary.samples_per_row)
        pass_hat = f"^{k}: {pct(summary.pass_hat_k.get(k))}" if summary.samples_per_row else "n/a"
        delta = report.delta.overall if name == "**overall**" and report.delta else deltas.get(name)
        lines.append(
            f"| {md_cell(name)} | {pct(rate.value)} | {pct(rate.ci_low)}–{pct(rate.ci_high)}"
            f" | {rate.n} | {reward_text} | {pct(summary.pass_at_k.get('1'))} | {pass_hat} | "
            f"{pp(delta.delta) if delta else '—'} | {md_cell(failures)} |"
        )
    lines += _rewards_section(report)
    lines += _delta_section(report)
    lines += baseline_section(report)
    lines += _failures_section(report)
    lines += _roles_section(report)
    lines += _failed_section(rollouts, tokenizer)
    lines += _recipe_section(report)
    lines += _train_section(report)
    lines += [
        "",
        f"Denominator: {report.overall.denominator}.",
        "",
        _files_line(report, files_at),
        "",
    ]
    return "\n".join(lines)
