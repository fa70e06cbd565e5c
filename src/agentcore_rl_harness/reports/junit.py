"""junit.xml: one testcase per rollout, failures and errors by status.

Valid against the strict JUnit schema Jenkins' xUnit plugin uses (junit-10.xsd): a <testcase>
may not hold <properties>, so each rollout's reward, status and session are lines of its
<system-out>; what ran (mode, model, overrides) are the suite's properties. Rollouts of all tasks
run at once, so every suite's `time` is the run's wall time (the sum of rollout times would
overstate it many times over); the summed rollout time is the suite property `rollout_time_s`.
"""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from ..records import Rollout, Status
from .model import Report


def render_junit(report: Report, rollouts: Sequence[Rollout]) -> bytes:
    """One testcase per rollout; failures by status; suite properties say what ran."""
    wall_time = f"{report.run.wall_time_s:.3f}"
    suites = ET.Element(
        "testsuites",
        name=f"agentcore-rl {report.run.mode} {report.run.id}",
        tests=str(len(rollouts)),
        failures=str(sum(1 for r in rollouts if _junit_kind(r) == "failure")),
        errors=str(sum(1 for r in rollouts if _junit_kind(r) == "error")),
        time=wall_time,
    )
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
            time=wall_time,
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
            ("rollout_time_s", f"{sum(r.elapsed_s for r in items):.3f}"),
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
            kind = _junit_kind(rollout)
            if kind:
                ET.SubElement(
                    case, kind, message=rollout.status.value, type=rollout.status.value
                ).text = _xml_text(rollout.error or "")
            ET.SubElement(case, "system-out").text = _xml_text(case_details(rollout))
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)


def case_details(rollout: Rollout) -> str:
    """A rollout's facts as `key: value` lines (a testcase's <system-out>)."""
    lines = [
        ("reward", "" if rollout.reward is None else repr(rollout.reward)),
        *((f"rewards.{name}", repr(value)) for name, value in rollout.rewards.items()),
        ("status", rollout.status.value),
        ("session_id", rollout.session_id),
        ("elapsed_s", f"{rollout.elapsed_s:.3f}"),
        ("phase", rollout.phase),
    ]
    return "".join(f"{key}: {value}\n" for key, value in lines)


def _section(config: dict, name: str) -> dict:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _xml_text(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (control characters in agent errors)."""
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def _junit_kind(rollout: Rollout) -> str | None:
    if rollout.status in (Status.INFRA_ERROR, Status.TASK_ERROR, Status.JUDGE_ERROR):  # not the agent's failure
        return "error"
    if rollout.success:
        return None
    return "failure"
