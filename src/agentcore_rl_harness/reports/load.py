"""Read a finished (or stopped) run directory back into a report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import HarnessError
from ..records import Rollout
from ..store import DISCARDED, RUN_INFO, read_rollouts
from .build import build_report
from .model import ITEM_PHASE, Report, RunInfo


@dataclass(frozen=True)
class LoadedRun:
    run_dir: Path
    report: Report
    rollouts: list[Rollout]


def read_discarded(run_dir: Path) -> list[Rollout]:
    """Earlier attempts a resume moved aside (they mark the redone rollouts as retried)."""
    path = Path(run_dir) / DISCARDED
    if not path.is_file():
        return []
    return [Rollout.from_json(json.loads(line))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _run_info(run_dir: Path) -> tuple[RunInfo, dict[str, list[str]]]:
    """The run section: from report.json, else from config.yaml and run.json."""
    existing = run_dir / "report.json"
    if existing.is_file():
        try:
            old = json.loads(existing.read_text(encoding="utf-8"))
            return RunInfo.model_validate(old["run"]), dict(old.get("task_tags") or {})
        except (ValueError, KeyError) as exc:
            raise HarnessError(
                f"{existing} is not a report.json ({exc}); delete it to rebuild from config.yaml"
            ) from exc
    info_path, config_path = run_dir / RUN_INFO, run_dir / "config.yaml"
    if not info_path.is_file() or not config_path.is_file():
        raise HarnessError(
            f"{run_dir}: report.json is missing and so is {RUN_INFO} or config.yaml; cannot tell "
            "the run's mode"
        )
    import yaml

    info = json.loads(info_path.read_text(encoding="utf-8"))
    run = RunInfo(
        id=run_dir.name, mode=info["mode"],
        config=yaml.safe_load(config_path.read_text(encoding="utf-8")) or {},
        overrides=list(info.get("overrides", [])), versions={}, git_sha=None, started_at="",
        wall_time_s=0.0,
    )
    return run, {}


def run_info(run_dir: Path) -> tuple[RunInfo, dict[str, list[str]]]:
    """A run directory's run section and task tags (what `agentcore-rl rescore` reports under)."""
    return _run_info(Path(run_dir))


def load_run(run_dir: Path) -> LoadedRun:
    """Rebuild the report of `run_dir` from rollouts.jsonl (plus its run metadata)."""
    from ..train_store import read_steps

    run_dir = Path(run_dir).resolve()
    rollouts = read_rollouts(run_dir)
    run, tags = _run_info(run_dir)
    if run.mode not in ITEM_PHASE:
        raise HarnessError(f"{run_dir}: unknown mode {run.mode!r}; valid: {sorted(ITEM_PHASE)}")
    report = build_report(
        run_id=run.id, mode=run.mode, config=run.config, overrides=run.overrides,
        versions=run.versions, git_sha=run.git_sha, started_at=run.started_at,
        wall_time_s=run.wall_time_s, rollouts=rollouts, item_phase=ITEM_PHASE[run.mode],
        train_steps=read_steps(run_dir), tags=tags, discarded=read_discarded(run_dir),
    )
    return LoadedRun(run_dir=run_dir, report=report, rollouts=rollouts)


def load_report(path: Path) -> Report:
    """A saved report: a report.json file, or a run directory (rebuilt from its rollouts)."""
    path = Path(path)
    if path.is_dir():
        if (path / "rollouts.jsonl").is_file():
            return load_run(path).report
        path = path / "report.json"
    if not path.is_file():
        raise HarnessError(f"{path}: neither a run directory nor a report.json")
    try:
        return Report.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise HarnessError(f"{path}: not a valid report.json: {exc}") from exc
