"""A run against its baseline (--agentcore-rl-compare), and the note a hosted baseline's report
carries: "the RL-trained policy" beside "the model the agent uses in production", on the same rows.

A baseline run with `sampler=hosted` passed every turn through to a hosted model
(`gateway/passthrough.py`): it captured no tokens, so its report says so, and a trained run
compared with it names that model. Pure functions over reports.
"""

from __future__ import annotations

from typing import Any

from .model import BaselineComparison, DeltaReport, Report
from .text import delta_table, md_cell


def hosted_model(report: Report) -> str | None:
    """'<model> (<provider>, <where>)' when the run's turns passed through a hosted model."""
    sampler: Any = report.run.config.get("sampler")
    if not isinstance(sampler, dict) or sampler.get("kind") != "hosted":
        return None
    hosted = sampler.get("hosted") or {}
    provider = hosted.get("provider", "openai")
    where = (hosted.get("region") or "the AWS default region") if provider == "bedrock" else hosted.get("url")
    return f"{hosted.get('model')} ({provider}, {where})"


def compare_with_baseline(report: Report, baseline: Report, *, path: str) -> BaselineComparison:
    from .compare import compare_reports

    comparison = compare_reports(baseline, report)
    return BaselineComparison(
        path=path, run_id=baseline.run.id, mode=baseline.run.mode, hosted=hosted_model(baseline),
        delta=DeltaReport(overall=comparison.overall, tasks=comparison.tasks, tags=comparison.tags),
        unpaired=comparison.unpaired_b)


def hosted_note(report: Report) -> str | None:
    """The line a hosted baseline's own report opens with (None for any other run)."""
    model = hosted_model(report)
    if model is None:
        return None
    return (f"Hosted baseline: every turn passed through to {model} (sampler=hosted). No token capture: "
            "its rollouts have no token ids, logprobs or traces and cannot be trained on; token counts "
            "are the hosted API's. Pair a trained run with it: --agentcore-rl-compare "
            f"with this run's directory (.../{report.run.id}) or a name saved with --agentcore-rl-save-baseline.")


def baseline_section(report: Report) -> list[str]:
    """report.md's comparison with the baseline (empty without one)."""
    found = report.baseline
    if found is None:
        return []
    from .compare import change_verdict
    from .text import pct, pp

    name = f"hosted model {found.hosted}" if found.hosted else f"{found.mode} run"
    overall = found.delta.overall
    rows = [*found.delta.tasks.items(), *((f"tag:{t}", d) for t, d in found.delta.tags.items()),
            ("**overall**", overall)]
    capture = (" The baseline's turns passed through the hosted model: no token capture there "
               "(no token ids or logprobs; its token counts are the hosted API's).") if found.hosted else ""
    return ["", "## Against the baseline (paired by task, row and sample)", "",
            f"Baseline: {md_cell(name)}, run `{md_cell(found.run_id)}` (`{md_cell(found.path)}`); this run: "
            f"`{md_cell(report.run.id)}` ({report.run.mode}). **{pct(overall.pre)} -> {pct(overall.post)} "
            f"({pp(overall.delta)}) on {overall.pairs} pairs; {change_verdict(overall)}.** Unpaired in this "
            f"run: {found.unpaired}.{capture}", "",
            *delta_table(rows, before="baseline", after="this run")]
