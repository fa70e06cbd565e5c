"""Write report.json, report.md and junit.xml from the report model and the rollouts."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ..records import Rollout, Status
from .model import Delta, Report, Summary


def write_reports(run_dir: Path, report: Report, rollouts: Sequence[Rollout]) -> None:
    run_dir = Path(run_dir)
    (run_dir / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
    (run_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    (run_dir / "junit.xml").write_bytes(render_junit(report, rollouts))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def verdict(summary: Summary) -> str:
    rate = summary.success_rate
    return (
        f"{_pct(rate.value)} success ({rate.n} rollouts, 95% CI "
        f"{_pct(rate.ci_low)}–{_pct(rate.ci_high)})"
    )


def delta_line(delta: Delta) -> str:
    if delta.delta is None:
        return "no paired rollouts"
    return (
        f"{_pct(delta.pre)} -> {_pct(delta.post)} ({100 * delta.delta:+.1f}pp, "
        f"{delta.pairs} pairs, {delta.improved} improved / {delta.regressed} regressed, "
        f"McNemar p={delta.p_value:.3g})"
    )


def _delta_section(report: Report) -> list[str]:
    if report.delta is None:
        return []
    lines = [
        "",
        "## Before and after training (paired by row and sample)",
        "",
        "| task | pre | post | delta | pairs | improved / regressed | p (McNemar) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, delta in [*report.delta.tasks.items(), ("**overall**", report.delta.overall)]:
        change = "n/a" if delta.delta is None else f"{100 * delta.delta:+.1f}pp"
        lines.append(
            f"| {_md_cell(name)} | {_pct(delta.pre)} | {_pct(delta.post)} | {change} | "
            f"{delta.pairs} | {delta.improved} / {delta.regressed} | {delta.p_value:.3g} |"
        )
    return lines


def _train_section(report: Report) -> list[str]:
    if not report.train:
        return []
    lines = ["", "## Training reward per step", "", "| step | reward | success | loss |",
             "|---|---|---|---|"]
    for step in report.train:
        reward = "n/a" if step.reward_mean is None else f"{step.reward_mean:.3f}"
        loss = "n/a" if step.loss is None else f"{step.loss:.4f}"
        lines.append(f"| {step.step} | {reward} | {_pct(step.success_rate)} | {loss} |")
    return lines


def render_markdown(report: Report) -> str:
    lines = [
        f"# agentcore-rl {report.run.mode} report — {report.run.id}",
        "",
        f"**{verdict(report.overall)}**, model `{report.run.config.get('model', {}).get('name')}`,"
        f" wall time {report.run.wall_time_s:.1f}s.",
        "",
        "| task | success | 95% CI | n | mean reward | pass@1 | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, summary in [*report.tasks.items(), ("**overall**", report.overall)]:
        rate = summary.success_rate
        failures = ", ".join(f"{k}: {v}" for k, v in summary.failures.items()) or "—"
        reward = "n/a" if summary.mean_reward is None else f"{summary.mean_reward:.3f}"
        pass1 = summary.pass_at_k.get("1")
        lines.append(
            f"| {_md_cell(name)} | {_pct(rate.value)} | {_pct(rate.ci_low)}–{_pct(rate.ci_high)}"
            f" | {rate.n} | {reward} | {_pct(pass1)} | {_md_cell(failures)} |"
        )
    lines += _delta_section(report)
    lines += _train_section(report)
    lines += [
        "",
        f"Denominator: {report.overall.denominator}.",
        "",
        "Files: [rollouts.jsonl](rollouts.jsonl) · [report.json](report.json) · "
        "[junit.xml](junit.xml) · [config.yaml](config.yaml)",
        "",
    ]
    return "\n".join(lines)


def render_junit(report: Report, rollouts: Sequence[Rollout]) -> bytes:
    """One testcase per rollout; failures by status; properties say what ran."""
    suites = ET.Element("testsuites")
    by_task: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        by_task.setdefault(rollout.task, []).append(rollout)
    for task, items in sorted(by_task.items()):
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=task,
            tests=str(len(items)),
            failures=str(sum(1 for r in items if _junit_kind(r) == "failure")),
            errors=str(sum(1 for r in items if _junit_kind(r) == "error")),
            skipped="0",
            time=f"{sum(r.elapsed_s for r in items):.3f}",
            hostname=platform.node(),
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("mode", report.run.mode),
            ("model", str(report.run.config.get("model", {}).get("name"))),
            ("overrides", json.dumps(report.run.overrides)),
        ):
            ET.SubElement(props, "property", name=key, value=value)
        for rollout in items:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=task,
                name=f"{rollout.row_id}-s{rollout.sample_index}[{rollout.phase}]",
                time=f"{rollout.elapsed_s:.3f}",
            )
            case_props = ET.SubElement(case, "properties")
            for key, value in (
                ("reward", "" if rollout.reward is None else repr(rollout.reward)),
                ("status", rollout.status.value),
                ("session_id", rollout.session_id),
                ("elapsed_s", f"{rollout.elapsed_s:.3f}"),
            ):
                ET.SubElement(case_props, "property", name=key, value=value)
            kind = _junit_kind(rollout)
            if kind:
                ET.SubElement(
                    case, kind, message=rollout.status.value, type=rollout.status.value
                ).text = rollout.error or ""
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def _junit_kind(rollout: Rollout) -> str | None:
    if rollout.status is Status.INFRA_ERROR:
        return "error"
    if rollout.success:
        return None
    return "failure"
