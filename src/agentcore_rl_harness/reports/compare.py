"""Paired comparison of two runs, and the CI gates (pure functions over reports).

Runs are paired by (task, row id, sample index) on their item-phase rollouts (`Report.outcomes`):
success by the exact McNemar test, reward by the paired bootstrap. A regression gate fails only
when the paired drop is larger than allowed AND significant (p < `SIGNIFICANCE`), so sampling
noise does not fail a build.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field

from ..errors import HarnessError
from .build import paired_report
from .model import Delta, GateFailure, Report

SIGNIFICANCE = 0.05
REGRESSION_METRICS = ("success_rate", "mean_reward")
_AMOUNT = re.compile(r"^\s*([+-]?\d+(?:\.\d+)?)\s*(pp|%)?\s*$")


class Comparison(BaseModel):
    """compare.json: run B against run A, paired by (task, row, sample)."""

    a: str = Field(description="Run A (the baseline): its directory or report path.")
    b: str = Field(description="Run B (the candidate).")
    a_run_id: str = Field(description="Run A's id.")
    b_run_id: str = Field(description="Run B's id.")
    overall: Delta = Field(description="All tasks: pre = A, post = B.")
    tasks: dict[str, Delta] = Field(description="Per task: pre = A, post = B.")
    tags: dict[str, Delta] = Field(default_factory=dict, description="Per task tag.")
    unpaired_a: int = Field(description="A's usable rollouts with no partner in B.")
    unpaired_b: int = Field(description="B's usable rollouts with no partner in A.")


def compare_reports(a: Report, b: Report, *, a_label: str = "A", b_label: str = "B") -> Comparison:
    tags = {**a.task_tags, **b.task_tags}
    paired = paired_report(a.outcomes, b.outcomes, tags, seed=int(b.run.config.get("seed") or 0))

    def keys(report: Report) -> set[tuple[str, str, int]]:
        return {(o.task, o.row_id, o.sample_index) for o in report.outcomes
                if o.status != "infra_error"}

    keys_a, keys_b = keys(a), keys(b)
    return Comparison(
        a=a_label, b=b_label, a_run_id=a.run.id, b_run_id=b.run.id,
        overall=paired.overall, tasks=paired.tasks, tags=paired.tags,
        unpaired_a=len(keys_a - keys_b), unpaired_b=len(keys_b - keys_a),
    )


def compare_runs(a_dir: Path, b_dir: Path) -> Comparison:
    """Compare two run directories (or report.json files); B is the candidate."""
    from .load import load_report

    return compare_reports(load_report(a_dir), load_report(b_dir), a_label=str(a_dir),
                           b_label=str(b_dir))


def parse_amount(text: str | float, *, metric: str) -> float:
    """'-2pp' / '-2%' -> -0.02 (percentage points); a bare number is absolute (-0.05)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _AMOUNT.match(str(text))
    if not match:
        raise HarnessError(
            f"gates.max_regression.{metric}={text!r}: expected an amount like '-2pp' "
            "(percentage points) or '-0.05' (absolute)"
        )
    value = float(match.group(1))
    return value / 100 if match.group(2) else value


def check_gates(
    report: Report, *, min_success_rate: float | dict[str, float] | None = None,
    baseline: Report | None = None, max_regression: dict[str, str] | None = None,
) -> list[GateFailure]:
    """The gates that fail, each with what was measured and the limit (empty: all pass).

    `min_success_rate`: a float for overall, or {task or 'overall': rate}. `max_regression`:
    {metric: allowed change}, metrics success_rate and mean_reward, judged on the paired test
    against `baseline` (e.g. {'success_rate': '-2pp'} allows a drop of up to 2 points).
    """
    failures = _min_success(report, min_success_rate)
    if max_regression:
        if baseline is None:
            raise HarnessError("gates.max_regression needs a baseline (--agentcore-rl-compare)")
        failures += _regressions(report, baseline, max_regression)
    return failures


def _min_success(report: Report, limit: float | dict[str, float] | None) -> list[GateFailure]:
    if limit is None:
        return []
    limits = {"overall": limit} if isinstance(limit, (int, float)) else dict(limit)
    failures = []
    for subject, threshold in limits.items():
        summary = report.overall if subject == "overall" else report.tasks.get(subject)
        if summary is None:
            raise HarnessError(
                f"gates.min_success_rate.{subject}: no such task in this run; tasks: "
                f"{sorted(report.tasks)}"
            )
        value = summary.success_rate.value
        if value is None or value < threshold:
            shown = "n/a" if value is None else f"{value:.3f}"
            failures.append(GateFailure(
                gate="gates.min_success_rate", subject=subject, value=value,
                threshold=float(threshold),
                message=f"gates.min_success_rate: {subject} success {shown} < {threshold:.3f}"
                        f" (n={summary.success_rate.n})",
            ))
    return failures


def _regressions(report: Report, baseline: Report, limits: dict[str, str]) -> list[GateFailure]:
    unknown = sorted(set(limits) - set(REGRESSION_METRICS))
    if unknown:
        raise HarnessError(
            f"gates.max_regression: unknown metric(s) {unknown}; valid: {list(REGRESSION_METRICS)}"
        )
    comparison = compare_reports(baseline, report)
    subjects = [("overall", comparison.overall), *comparison.tasks.items()]
    failures = []
    for metric, text in limits.items():
        allowed = parse_amount(text, metric=metric)
        for subject, delta in subjects:
            change, p_value = ((delta.delta, delta.p_value) if metric == "success_rate"
                               else (delta.reward_delta, delta.reward_p_value))
            if subject == "overall" and delta.pairs == 0:
                failures.append(GateFailure(
                    gate=f"gates.max_regression.{metric}", subject=subject, value=None,
                    threshold=allowed,
                    message=f"gates.max_regression.{metric}: no rollouts pair with baseline "
                            f"{baseline.run.id} (same task, row id and sample needed)",
                ))
                continue
            if change is None or p_value is None:
                continue
            if change < allowed - 1e-12 and p_value < SIGNIFICANCE:
                unit = "pp" if metric == "success_rate" else ""
                scale = 100 if metric == "success_rate" else 1
                failures.append(GateFailure(
                    gate=f"gates.max_regression.{metric}", subject=subject, value=change,
                    threshold=allowed, p_value=p_value,
                    message=f"gates.max_regression.{metric}: {subject} changed "
                            f"{scale * change:+.3g}{unit} vs baseline {baseline.run.id} "
                            f"(allowed {scale * allowed:+.3g}{unit}, paired p={p_value:.3g}, "
                            f"{delta.pairs} pairs)",
                ))
    return failures


def render_comparison(comparison: Comparison) -> str:
    """compare.md: one table, B against A."""
    from .text import delta_table, md_cell as _md_cell, pct as _pct, pp as _pp

    overall = comparison.overall
    lines = [
        f"# agentcore-rl compare — {_md_cell(comparison.b_run_id)} vs "
        f"{_md_cell(comparison.a_run_id)}",
        "",
        f"**{_pct(overall.pre)} -> {_pct(overall.post)} ({_pp(overall.delta)}) on "
        f"{overall.pairs} paired rollouts; {change_verdict(overall)}**",
        "",
        f"A = `{_md_cell(comparison.a)}`, B = `{_md_cell(comparison.b)}`; unpaired: "
        f"{comparison.unpaired_a} in A, {comparison.unpaired_b} in B.",
        "",
    ]
    rows = [*comparison.tasks.items(), *((f"tag:{t}", d) for t, d in comparison.tags.items()),
            ("**overall**", overall)]
    lines += delta_table(rows, before="A", after="B")
    return "\n".join(lines) + "\n"


def change_verdict(delta: Delta) -> str:
    """What changed, each claim with its own test: success by McNemar, mean reward by the paired
    bootstrap. No discordant pair is "no change", never a significant one."""
    if not delta.pairs:
        return "nothing to compare (no paired rollouts)"
    if delta.improved + delta.regressed == 0:
        success = "success unchanged on every pair (no discordant pairs)"
    elif delta.p_value < SIGNIFICANCE:
        success = f"a significant change in success (McNemar p={delta.p_value:.3g})"
    else:
        success = f"no significant change in success (McNemar p={delta.p_value:.3g})"
    reward_p = delta.reward_p_value
    if delta.reward_delta is None or reward_p is None or abs(delta.reward_delta) < 1e-12:
        return success
    if reward_p < SIGNIFICANCE:
        return (f"{success}; mean reward changed significantly ({delta.reward_delta:+.3g}, "
                f"paired bootstrap p={reward_p:.3g})")
    return f"{success}; mean reward {delta.reward_delta:+.3g} (not significant, p={reward_p:.3g})"


def write_comparison(comparison: Comparison, out_dir: Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "compare.json", out_dir / "compare.md"
    json_path.write_text(comparison.model_dump_json(indent=2), encoding="utf-8")
    md_path.write_text(render_comparison(comparison), encoding="utf-8")
    return json_path, md_path
