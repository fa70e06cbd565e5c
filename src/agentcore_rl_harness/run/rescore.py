"""`agentcore-rl rescore RUN_DIR`: the tasks' rewards and test bodies again, on recorded rollouts.

For task authors iterating on a reward: no agent runs, no model loads. Each recorded rollout whose
agent finished (`completed`, or `task_failed` with a result) is scored again by the task as it
is now, through the run's one `Scorer`, with its recorded result, traces and usage, and (for
tasks that inspect files) the session's final files saved in the run directory (`states.py`),
opened again in an isolated sandbox. Rollouts whose agent did not finish (timeout, agent or
infrastructure error, a payload that failed) are kept as recorded. The new records and reports
go to `RUN_DIR/rescore-<UTC time>/`, beside the old ones, so `agentcore-rl report compare RUN_DIR
RUN_DIR/rescore-...` pairs the two scorings rollout by rollout.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import compose_config
from ..errors import HarnessError
from ..records import Rollout, SessionOutcome, Status
from ..judges.usage import role_usage
from ..reports.build import build_report
from ..reports.load import run_info
from ..reports.model import ITEM_PHASE, Report
from ..reports.render import write_reports
from ..store import ROLLOUTS, read_rollouts
from ..tasks import TaskSpec, load_rows
from ..train_store import read_steps
from . import states
from .cases import Case, Episode
from .loop import LoopThread
from .sandbox import FinalSandbox, Sandbox
from .judging import Judging
from .scoring import RolloutHandle, Scorer

SUMMARY_FILE = "rescore.json"


@dataclass(frozen=True)
class Rescored:
    out_dir: Path
    report: Report
    rescored: int
    kept: int
    changed: int


def scorable(rollout: Rollout) -> bool:
    """The agent finished, so the task can judge it again (a payload that failed has no result;
    a judge_error rollout is asked of the judge again)."""
    return rollout.status is Status.COMPLETED or (
        rollout.status in (Status.TASK_FAILED, Status.TASK_ERROR, Status.JUDGE_ERROR) and rollout.result is not None)


def _rows(spec: TaskSpec, splits: set[str]) -> dict[str, dict[str, Any]]:
    return {str(row["id"]): row for split in sorted(splits) for row in load_rows(spec, split)}


def _check(run_dir: Path, rollouts: list[Rollout], specs: Mapping[str, TaskSpec], tasks_label: str,
           splits: set[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every recorded task and row still exists, and a task that inspects files has them kept."""
    missing = sorted({r.task for r in rollouts} - set(specs))
    if missing:
        raise HarnessError(
            f"{run_dir} recorded task(s) {missing} that no longer exist under {tasks_label} (tasks found "
            f"there: {sorted(specs) or 'none'}); pass --tasks with the folder or file that defines them")
    rows = {name: _rows(specs[name], splits) for name in {r.task for r in rollouts}}
    gone = sorted({(r.task, r.row_id) for r in rollouts if r.row_id not in rows[r.task]})
    if gone:
        shown = ", ".join(f"{task}/{row}" for task, row in gone[:5])
        raise HarnessError(f"{len(gone)} recorded row(s) are no longer in their task's dataset ({shown}); "
                           "rescore needs the rows the run was made with")
    for name in sorted(rows):
        if not specs[name].needs_sandbox:
            continue
        judged = [r for r in rollouts if r.task == name and scorable(r)]
        found = [states.load(run_dir, r.session_id) for r in judged]
        if judged and all(state is None for state, _ in found):
            raise HarnessError(
                f"task {name} inspects its session's files (the sandbox fixture), but {run_dir} kept no "
                f"final state for any of its {len(judged)} rollouts ({found[0][1]}); run it again with "
                "runtime=local and runtime.keep_final_state=true (runtime.final_state_mb bounds the size)")
    return rows


def rescore(run_dir: Path, specs: Mapping[str, TaskSpec], *, tasks_label: str = "the tasks given",
            write: Callable[[str], None] = print) -> Rescored:
    """Score every finished rollout of `run_dir` again with `specs`; write the new run beside it."""
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir() or not (run_dir / ROLLOUTS).is_file() or not (run_dir / "config.yaml").is_file():
        raise HarnessError(f"{run_dir} is not a run directory (it needs {ROLLOUTS} and config.yaml); "
                           "give the directory a run wrote, e.g. outputs/<time>-eval")
    started, clock = datetime.now(timezone.utc), time.monotonic()
    rollouts = read_rollouts(run_dir)
    if not rollouts:
        raise HarnessError(f"{run_dir / ROLLOUTS} holds no rollouts: nothing to rescore")
    config = compose_config(source=run_dir / "config.yaml")
    rows = _check(run_dir, rollouts, specs, tasks_label, {"train", config.typed.eval.split})
    out = run_dir / f"rescore-{started.strftime('%Y%m%dT%H%M%S%fZ')}"
    out.mkdir()
    loop = LoopThread(name="agentcore-rl-rescore")
    runtime = judging = None
    try:
        if any(specs[name].needs_sandbox for name in rows):
            from .compose import build_runtime

            from ..runtimes.local_config import LocalRuntimeConfig

            # restores run locally: the run's own local settings, or the local defaults
            local = config.typed.runtime if config.typed.runtime.kind == "local" else LocalRuntimeConfig()
            runtime = build_runtime(dataclasses.replace(config.typed, runtime=local), private_dirs=(run_dir,))
        judging = _judging(config.typed, run_dir, out, rollouts)
        scorer = Scorer(run_id=out.name, call=loop.call, fixtures=lambda: {"agentcore_rl_config": config.typed},
                        judging=lambda: judging)
        new = [_rescore_one(r, specs[r.task], rows[r.task][r.row_id], run_dir, runtime, scorer, loop)
               if scorable(r) else r for r in rollouts]
    finally:
        if runtime is not None:
            loop.run(runtime.aclose(), timeout=60)
        if judging is not None:
            loop.run(judging.aclose(), timeout=60)
        loop.close()
    return _write(run_dir, out, rollouts, new, specs, config.typed.report, started, clock, write)


def _judging(typed: Any, run_dir: Path, out: Path, rollouts: list[Rollout]) -> Judging:
    """The run's judge for judged rewards: the run's answer cache (RUN_DIR/judge), so questions
    asked before are not paid again; new usage in OUT/judge. A group is its recorded members."""
    from ..judges.clients import build_client, identity
    from ..judges.service import JudgeService
    from ..judges.usage import JUDGE_DIR

    judge = typed.roles.judge
    service = JudgeService(judge, identity=identity(judge, policy_model=typed.model.name),
                           client=lambda: build_client(judge, policy=None), cache_dir=run_dir / JUDGE_DIR,
                           usage_dir=out / JUDGE_DIR)
    groups: dict[str, dict[int, RolloutHandle]] = {}
    for rollout in rollouts:
        if scorable(rollout):
            groups.setdefault(rollout.group_id, {})[rollout.sample_index] = RolloutHandle.from_record(rollout)

    async def members(case: Case) -> dict[int, Any]:
        return dict(groups.get(case.group_id, {}))

    return Judging(service, members=members)


def _rescore_one(rollout: Rollout, spec: TaskSpec, row: dict[str, Any], run_dir: Path, runtime: Any,
                 scorer: Scorer, loop: LoopThread) -> Rollout:
    case = Case(spec=spec, row=row, sample_index=rollout.sample_index, phase=rollout.phase, step=rollout.step)
    state, why = states.load(run_dir, rollout.session_id) if spec.needs_sandbox else (None, None)
    outcome = SessionOutcome(status=Status.COMPLETED, result=rollout.result, error=None,
                             elapsed_s=rollout.elapsed_s, final_state=state, final_state_error=why)
    final = FinalSandbox(runtime, outcome, session_id=rollout.session_id) if spec.needs_sandbox else None
    episode = Episode(case=case, session_id=rollout.session_id, outcome=outcome, traces=rollout.traces,
                      turns=rollout.turns, usage=rollout.usage,
                      sandbox=Sandbox(final, loop=loop) if final is not None else None)
    try:
        return scorer.score(case, episode)
    finally:
        if final is not None:
            loop.run(final.aclose(), timeout=60)


def _write(run_dir: Path, out: Path, old: list[Rollout], new: list[Rollout], specs: Mapping[str, TaskSpec],
           report_config: Any, started: datetime, clock: float, write: Callable[[str], None]) -> Rescored:
    with open(out / ROLLOUTS, "w", encoding="utf-8") as handle:
        for rollout in new:
            handle.write(json.dumps(rollout.to_json()) + "\n")
    info, tags = run_info(run_dir)
    report = build_report(
        run_id=out.name, mode=info.mode, config=info.config, overrides=info.overrides,
        versions=info.versions, git_sha=info.git_sha, started_at=started.isoformat(),
        wall_time_s=round(time.monotonic() - clock, 3), rollouts=new, item_phase=ITEM_PHASE[info.mode],
        train_steps=read_steps(run_dir), tags={**tags, **{n: list(s.tags) for n, s in specs.items() if s.tags}},
        roles=role_usage(out, new, info.config))
    write_reports(out, report, new, formats=report_config.formats, step_summary=False)
    rescored = sum(1 for r in old if scorable(r))
    changed = sum(1 for a, b in zip(old, new) if (a.success, a.reward) != (b.success, b.reward))
    summary = {"source": str(run_dir), "rescored": rescored, "kept_as_recorded": len(old) - rescored,
               "changed": changed}
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    write(f"agentcore-rl rescore: {rescored} rollouts scored again ({changed} changed), "
          f"{len(old) - rescored} kept as recorded (their agent did not finish) -> {out}")
    write(f"compare the two scorings: agentcore-rl report compare {run_dir} {out}")
    return Rescored(out_dir=out, report=report, rescored=rescored, kept=len(old) - rescored, changed=changed)
