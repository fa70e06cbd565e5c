"""Write report.json, report.md, report.html and junit.xml from the report model and rollouts."""

from __future__ import annotations

import json
import os
import platform
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ..config import REPORT_FORMATS
from ..records import Rollout, Status
from .build import deduplicate
from .model import Delta, Report, Summary

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def write_reports(
    run_dir: Path, report: Report, rollouts: Sequence[Rollout], *, tokenizer: Path | None = None,
    formats: Sequence[str] = REPORT_FORMATS, step_summary: bool = True,
) -> None:
    """The report files `formats` names (default all four); report.md is also appended to
    $GITHUB_STEP_SUMMARY when that is set and `step_summary` is true.

    `tokenizer` (an HF folder) adds decoded text to the HTML token view; ids are always shown.
    """
    from .html import render_html

    run_dir = Path(run_dir)
    unique, _ = deduplicate(rollouts)
    markdown = render_markdown(report)
    writers = {
        "json": ("report.json", lambda: report.model_dump_json(indent=2)),
        "md": ("report.md", lambda: markdown),
        "html": ("report.html", lambda: render_html(report, unique, tokenizer=tokenizer)),
        "junit": ("junit.xml", lambda: render_junit(report, unique)),
    }
    for name in formats:
        filename, produce = writers[name]
        content = produce()
        if isinstance(content, bytes):
            (run_dir / filename).write_bytes(content)
        else:
            (run_dir / filename).write_text(content, encoding="utf-8")
    summary_path = os.environ.get(STEP_SUMMARY_ENV)
    if step_summary and summary_path:
        with open(summary_path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}pp"


def _md_cell(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
            .replace("<", "&lt;").replace(">", "&gt;"))


def verdict(summary: Summary) -> str:
    rate = summary.success_rate
    return (
        f"{_pct(rate.value)} success ({rate.n} rollouts, 95% CI "
        f"{_pct(rate.ci_low)}–{_pct(rate.ci_high)})"
    )


def delta_line(delta: Delta) -> str:
    if delta.delta is None:
        return "no paired rollouts"
    line = (
        f"{_pct(delta.pre)} -> {_pct(delta.post)} ({_pp(delta.delta)}, "
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
            parts.append(f"{_pp(overall.delta)} vs pre-training ({significant}, "
                         f"p={overall.p_value:.3g})")
    if report.gates:
        parts.append(f"{len(report.gates)} gate(s) FAILED")
    infra = report.overall.failures.get(Status.INFRA_ERROR.value, 0)
    if infra:
        parts.append(f"{infra} infrastructure error(s)")
    return "; ".join(parts)


def _delta_section(report: Report) -> list[str]:
    if report.delta is None:
        return []
    rows = [*report.delta.tasks.items(),
            *((f"tag:{tag}", delta) for tag, delta in report.delta.tags.items()),
            ("**overall**", report.delta.overall)]
    return ["", "## Before and after training (paired by task, row and sample)", "",
            *delta_table(rows, before="pre", after="post")]


def delta_table(rows: Sequence[tuple[str, Delta]], *, before: str, after: str) -> list[str]:
    """The markdown table of paired deltas (run mode's pre/post, or `report compare`'s A/B)."""
    lines = [
        f"| task | {before} | {after} | delta | pairs | improved / regressed | p (McNemar) "
        "| reward delta [95% CI] | p (bootstrap) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, delta in rows:
        reward = "n/a" if delta.reward_delta is None else (
            f"{delta.reward_delta:+.3f} [{_num(delta.reward_ci_low)}, {_num(delta.reward_ci_high)}]")
        reward_p = "n/a" if delta.reward_p_value is None else f"{delta.reward_p_value:.3g}"
        lines.append(
            f"| {_md_cell(name)} | {_pct(delta.pre)} | {_pct(delta.post)} | {_pp(delta.delta)} | "
            f"{delta.pairs} | {delta.improved} / {delta.regressed} | {delta.p_value:.3g} | "
            f"{reward} | {reward_p} |"
        )
    return lines


def _train_section(report: Report) -> list[str]:
    if not report.train:
        return []
    lines = ["", "## Training reward per step", "", "| step | reward | success | loss |",
             "|---|---|---|---|"]
    for step in report.train:
        lines.append(f"| {step.step} | {_num(step.reward_mean)} | {_pct(step.success_rate)} | "
                     f"{_num(step.loss, 4)} |")
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
        lines.append(f"- gate FAILED: {_md_cell(gate.message)}")
    return lines


def render_markdown(report: Report) -> str:
    model = report.run.config.get("model", {})
    model_name = model.get("name") if isinstance(model, dict) else model
    lines = [
        f"# agentcore-rl {report.run.mode} report — {_md_cell(report.run.id)}",
        "",
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
            f"{reward.value:.3f} [{_num(reward.ci_low)}, {_num(reward.ci_high)}]")
        k = str(summary.samples_per_row)
        pass_hat = f"^{k}: {_pct(summary.pass_hat_k.get(k))}" if summary.samples_per_row else "n/a"
        delta = report.delta.overall if name == "**overall**" and report.delta else deltas.get(name)
        lines.append(
            f"| {_md_cell(name)} | {_pct(rate.value)} | {_pct(rate.ci_low)}–{_pct(rate.ci_high)}"
            f" | {rate.n} | {reward_text} | {_pct(summary.pass_at_k.get('1'))} | {pass_hat} | "
            f"{_pp(delta.delta) if delta else '—'} | {_md_cell(failures)} |"
        )
    lines += _delta_section(report)
    lines += _failures_section(report)
    lines += _train_section(report)
    lines += [
        "",
        f"Denominator: {report.overall.denominator}.",
        "",
        "Files: [report.html](report.html) · [rollouts.jsonl](rollouts.jsonl) · "
        "[report.json](report.json) · [junit.xml](junit.xml) · [config.yaml](config.yaml)"
        + (" · [train/steps.jsonl](train/steps.jsonl)" if report.train else ""),
        "",
    ]
    return "\n".join(lines)


def render_junit(report: Report, rollouts: Sequence[Rollout]) -> bytes:
    """One testcase per rollout; failures by status; properties say what ran."""
    suites = ET.Element("testsuites")
    by_task: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        by_task.setdefault(rollout.task, []).append(rollout)
    config = report.run.config
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
            timestamp=report.run.started_at[:19] or "1970-01-01T00:00:00",
            hostname=platform.node() or "localhost",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("mode", report.run.mode),
            ("model", str(_section(config, "model").get("name"))),
            ("trainer", str(_section(config, "trainer").get("kind"))),
            ("overrides", json.dumps(report.run.overrides)),
            ("run_id", report.run.id),
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
                ("phase", rollout.phase),
            ):
                ET.SubElement(case_props, "property", name=key, value=value)
            kind = _junit_kind(rollout)
            if kind:
                ET.SubElement(
                    case, kind, message=rollout.status.value, type=rollout.status.value
                ).text = _xml_text(rollout.error or "")
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def _section(config: dict, name: str) -> dict:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _xml_text(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (control characters in agent errors)."""
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def _junit_kind(rollout: Rollout) -> str | None:
    if rollout.status is Status.INFRA_ERROR:
        return "error"
    if rollout.success:
        return None
    return "failure"
