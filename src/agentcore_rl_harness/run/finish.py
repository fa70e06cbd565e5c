"""Finishing a run: the report, its gates, baselines, the collect dataset and whether it failed.

Pure of pytest: `run_failed` says whether the run's own outcome fails the process (an
infrastructure error, a failed gate, a failure that is not a task's); `pytest_outcomes.exit_code`
turns that into pytest's exit status.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from ..reports.config import GatesConfig, ReportConfig
from ..errors import HarnessError
from ..records import Rollout, Status
from ..reports import render
from ..reports.baseline import compare_with_baseline
from ..reports.compare import check_gates
from ..reports.load import load_report
from ..reports.model import ITEM_PHASE, Interrupted, Report
from ..reports.text import interrupted_banner
from ..store import write_parquet
from ..train_store import latest_checkpoint

BASELINES_DIR = ".agentcore-rl/baselines"
VERSIONED_PACKAGES = ("agentcore-rl-harness", "torch", "transformers", "bedrock-agentcore")


def judge_gates(report: Report, gates: GatesConfig, compare_path: Path | None) -> list[str]:
    """CI gates: min success rate, and regressions against a baseline (paired, p < 0.05).
    The failures go on `report.gates`; returned as messages (a bad gate setting is one too)."""
    try:
        baseline = load_report(compare_path) if compare_path else None
        if baseline is not None:
            report.baseline = compare_with_baseline(report, baseline, path=str(compare_path))
        failures = check_gates(
            report, min_success_rate=gates.min_success_rate, baseline=baseline,
            max_regression=gates.max_regression,
        )
    except HarnessError as exc:
        return [f"gate configuration: {exc}"]
    report.gates = failures
    return [failure.message for failure in failures]


def run_failed(*, infra_errors: int, other_failures: int, gate_failures: Sequence[str]) -> bool:
    """A run fails the process for an infrastructure error, a failed gate, or a failed item that
    is not a task's; a task's own failed rollouts are data (DESIGN.md, Exit status)."""
    return bool(infra_errors or other_failures or gate_failures)


def write_report_files(
    run_dir: Path, report: Report, rollouts: list[Rollout], settings: ReportConfig,
) -> None:
    """The report files `report.formats` names; report.md also to $GITHUB_STEP_SUMMARY if asked."""
    render.write_reports(
        run_dir, report, rollouts, formats=settings.formats, step_summary=settings.step_summary
    )


def baseline_path(rootdir: Path, name: str) -> Path:
    """Where `--agentcore-rl-save-baseline NAME` keeps a report, and `--agentcore-rl-compare NAME`
    finds it (a run directory or a report.json path works too)."""
    return Path(rootdir) / BASELINES_DIR / f"{name}.json"


def resolve_baseline(rootdir: Path, value: str) -> Path:
    path = Path(value)
    if path.exists():
        return path
    named = baseline_path(rootdir, value)
    if named.is_file():
        return named
    raise HarnessError(
        f"--agentcore-rl-compare {value!r}: not a run directory, a report.json, nor a baseline "
        f"saved with --agentcore-rl-save-baseline (looked in {named.parent})"
    )


def write_baseline(rootdir: Path, name: str, report: Report) -> Path:
    """Keep `report` as the named baseline for `--agentcore-rl-compare NAME`."""
    path = baseline_path(rootdir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return path


def save_dataset(run_dir: Path, rollouts: Sequence[Rollout], write: Callable[[str], None]) -> bool:
    """`collect` mode's rollouts.parquet (infra errors left out); False (and said) if it failed."""
    kept = [r for r in rollouts if r.status is not Status.INFRA_ERROR]
    try:
        write_parquet(run_dir, kept)
    except Exception as exc:  # pyarrow / datasets: rollouts.jsonl still holds every rollout
        write(f"agentcore-rl collect: cannot write rollouts.parquet "
              f"({type(exc).__name__}: {exc}); rollouts.jsonl has every rollout")
        return False
    return True


def summary_lines(*, mode: str, report: Report | None, run_dir: Path | None, infra_errors: int,
                  gate_failures: Sequence[str]) -> list[str]:
    """The run's closing lines (`run_dir` None: no rollout ran, nothing was written)."""
    if report is None:
        return []
    if run_dir is None:
        lines = [f"agentcore-rl {mode}: no rollout ran, so no run directory was written"]
    else:
        stopped_early = report.interrupted is not None and not report.overall.rollouts
        lines = [f"agentcore-rl {mode}: " + (f"no {ITEM_PHASE[mode]} rollout finished before the stop"
                                             if stopped_early else render.verdict(report.overall))]
        if report.interrupted is not None:
            lines.append(f"agentcore-rl {mode}: {interrupted_banner(report)}")
        if report.delta is not None:
            lines.append(f"agentcore-rl pre -> post: {render.delta_line(report.delta.overall)}")
        lines.append(f"agentcore-rl run directory: {run_dir}")
    if infra_errors:
        lines.append(f"agentcore-rl: {infra_errors} infrastructure error(s): exit 1")
    lines += [f"agentcore-rl gate FAILED: {failure}" for failure in gate_failures]
    return lines


def interrupted(run_dir: Path, rollouts: Sequence[Rollout], train_steps: int, resume: str) -> Interrupted:
    """What a stopped run left on disk, and the command that continues it."""
    by_phase: dict[str, int] = {}
    for rollout in rollouts:
        by_phase[rollout.phase] = by_phase.get(rollout.phase, 0) + 1
    newest = latest_checkpoint(run_dir)
    return Interrupted(rollouts_on_disk=len(rollouts), by_phase=by_phase, train_steps=train_steps,
                       checkpoint=f"checkpoints/{newest[1].name}" if newest else None, resume=resume)


def versions() -> dict[str, str]:
    """Installed versions of the packages a report names."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in VERSIONED_PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def git_sha(rootdir: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=rootdir, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None
