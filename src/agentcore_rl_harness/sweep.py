"""`agentcore-rl sweep`: a Hydra app whose every job is one pytest session in its own process.

In-process `pytest.main` keeps test modules imported between jobs, so each job writes its composed
config to `<job dir>/config.yaml` and runs

    python -m pytest --agentcore-rl MODE PATHS --agentcore-rl-config <job>/config.yaml
        --agentcore-rl-out <job>/run [PYTEST ARGS]

with absolute paths. The `sweep` node (mode, paths, pytest_args) configures the app itself and
is not part of the job's config. At the end `sweep.json` and `sweep.md` summarise every job of
the sweep directory (overrides, headline metrics, best job marked); the exit status is 1 if any
job failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from .config import PACKAGED_CONFIG_MODULE, HydraJob, hydra_job, settable_override
from .trackers.base import SWEEP_DIR_ENV, SWEEP_JOB_ENV

APP_CONFIG = "agentcore_rl_sweep"
JOB_RESULT = "job.json"
MODES = ("eval", "collect", "train", "run")


@dataclass
class SweepSettings:
    """The `sweep` node: what each job runs."""

    mode: str = "eval"
    paths: list[str] = field(default_factory=lambda: ["."])
    pytest_args: list[str] = field(default_factory=list)
    timeout_s: float | None = None


RAY_LAUNCHER = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
RAY_LAUNCHER_OBJECT_STORE = 78_643_200
"""hydra-ray-launcher's default `object_store_memory` for the cluster it starts (1.2.2)."""


def _register() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(
        name=APP_CONFIG,
        node={"defaults": ["config", "_self_"], "sweep": SweepSettings(),
              "hydra": {"callbacks": {"agentcore_rl_loopback_ray": {
                  "_target_": f"{__name__}.LoopbackRay"}}}},
    )


class LoopbackRay(Callback):
    """`hydra/launcher=ray` without an address starts its local cluster here first, on 127.0.0.1
    with no dashboard (`runtimes/ray_loopback.py`); the launcher then uses the Ray that runs.
    With `hydra.launcher.ray.init.address` set it joins that cluster as before."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        if launcher.get("_target_") != RAY_LAUNCHER:
            return
        from omegaconf import OmegaConf

        init = OmegaConf.to_container(launcher.ray.init, resolve=True) or {}
        if init.get("address") not in (None, "local"):
            return
        init.setdefault("object_store_memory", RAY_LAUNCHER_OBJECT_STORE)
        from .runtimes.ray_loopback import start_local

        start_local(**init)


def _config_dir() -> Path:
    """The project's configs/ when it has a config.yaml, else the packaged defaults."""
    project = Path.cwd() / "configs"
    if (project / "config.yaml").is_file():
        return project.resolve()
    from importlib.resources import files

    return Path(str(files(PACKAGED_CONFIG_MODULE)))


def _given(argv: Sequence[str], key: str) -> str | None:
    for arg in argv:
        if arg.startswith(key + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv: Sequence[str]) -> int:
    """Run the Hydra app with `argv` (Hydra's own flags and overrides)."""
    import hydra

    argv = list(argv)
    if any(arg in ("-h", "--help", "--hydra-help", "--info", "-i", "--cfg", "-c") or
           arg.startswith(("--info=", "--cfg=")) for arg in argv):
        return _hydra(argv, lambda cfg: None, hydra)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    multirun = "-m" in argv or "--multirun" in argv
    dir_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    sweep_dir = _given(argv, dir_key)
    if sweep_dir is None:
        sweep_dir = str(Path.cwd() / "sweeps" / stamp)
        argv.append(f"{dir_key}={sweep_dir}")
    sweep_dir_path = Path(sweep_dir).resolve()
    if _given(argv, "hydra.sweep.subdir") is None and multirun:
        argv.append("hydra.sweep.subdir=job-${hydra.job.num}")
    _hydra(argv, run_job, hydra)
    summary = summarize_sweep(sweep_dir_path)
    print(f"agentcore-rl sweep: {sweep_dir_path / 'sweep.md'}")
    print(render_summary(summary), end="")
    return 1 if summary["failed"] or not summary["jobs"] else 0


def _hydra(argv: list[str], task, hydra) -> int:
    _register()
    app = hydra.main(config_path=str(_config_dir()), config_name=APP_CONFIG, version_base=None)(task)
    saved = sys.argv
    sys.argv = ["agentcore-rl sweep", *(arg if arg.startswith("-") else settable_override(arg) for arg in argv),
                f"hydra.searchpath=[pkg://{PACKAGED_CONFIG_MODULE}]"]
    try:
        app()
    finally:
        sys.argv = saved
    return 0


def run_job(cfg: Any) -> dict[str, Any]:
    """One Hydra job: write its config, run one pytest session, record the outcome."""
    job = hydra_job(cfg)
    job_dir, settings = job.output_dir, job.settings
    job_dir.mkdir(parents=True, exist_ok=True)
    import yaml

    (job_dir / "config.yaml").write_text(yaml.safe_dump(job.resolved, sort_keys=False), encoding="utf-8")
    result: dict[str, Any] = {"job": job.number, "overrides": list(job.overrides), "dir": str(job_dir),
                              "mode": settings.mode}
    if settings.mode not in MODES:
        result.update(returncode=None, error=f"sweep.mode={settings.mode!r}; valid: {list(MODES)}")
    else:
        result.update(_run_pytest(job_dir, settings, env=job_environment(job)))
    (job_dir / JOB_RESULT).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def job_environment(job: HydraJob) -> dict[str, str]:
    """The job's pytest process environment: a multirun job also names its sweep (trackers group
    the jobs of one sweep: a W&B group, an MLflow parent run, TensorBoard dirs side by side)."""
    env = dict(os.environ)
    if job.sweep_dir is not None:
        env.update({SWEEP_DIR_ENV: str(job.sweep_dir), SWEEP_JOB_ENV: str(job.number)})
    return env


def _run_pytest(job_dir: Path, settings: SweepSettings, env: dict[str, str]) -> dict[str, Any]:
    run_dir = job_dir / "run"
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
        "--agentcore-rl", settings.mode,
        *(str(Path(p).resolve()) for p in settings.paths),
        "--agentcore-rl-config", str(job_dir / "config.yaml"),
        "--agentcore-rl-out", str(run_dir),
        *settings.pytest_args,
    ]
    log = job_dir / "pytest.log"
    with open(log, "w", encoding="utf-8") as handle:
        try:
            completed = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                       timeout=settings.timeout_s, env=env)
            returncode, error = completed.returncode, None
        except subprocess.TimeoutExpired:
            returncode, error = None, f"timed out after {settings.timeout_s}s"
    if returncode not in (0, None):
        error = f"pytest exited {returncode}; see {log}"
    return {"command": command, "returncode": returncode, "error": error,
            "run_dir": str(run_dir), "log": str(log)}


# -- the summary -----------------------------------------------------------------------------


def _headline(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "report.json"
    if not path.is_file():
        return {}
    report = json.loads(path.read_text(encoding="utf-8"))
    overall = report["overall"]
    metrics = {
        "success_rate": overall["success_rate"]["value"],
        "success_ci": [overall["success_rate"]["ci_low"], overall["success_rate"]["ci_high"]],
        "n": overall["success_rate"]["n"],
        "mean_reward": overall["mean_reward"]["value"],
        "failures": overall["failures"],
    }
    if report.get("delta"):
        metrics["delta"] = report["delta"]["overall"]["delta"]
        metrics["delta_p_value"] = report["delta"]["overall"]["p_value"]
    return metrics


def summarize_sweep(sweep_dir: Path) -> dict[str, Any]:
    """Collect every job of `sweep_dir` into sweep.json and sweep.md; mark the best job."""
    jobs = []
    for path in sorted(Path(sweep_dir).glob(f"**/{JOB_RESULT}")):
        job = json.loads(path.read_text(encoding="utf-8"))
        job["metrics"] = _headline(Path(job.get("run_dir") or path.parent / "run"))
        job["ok"] = job.get("returncode") == 0 and bool(job["metrics"])
        jobs.append(job)
    jobs.sort(key=lambda job: (job["job"], job["dir"]))

    def score(job: dict[str, Any]) -> tuple[float, float]:
        metrics = job["metrics"]
        return (metrics.get("success_rate") or 0.0, metrics.get("mean_reward") or 0.0)

    finished = [job for job in jobs if job["ok"]]
    top = max(map(score, finished)) if finished else None
    leaders = [job for job in finished if score(job) == top]
    best = leaders[0] if len(leaders) == 1 else None  # a tie has no best job
    for job in jobs:
        job["best"] = job is best
    summary = {
        "sweep_dir": str(sweep_dir),
        "jobs": jobs,
        "best": None if best is None else best["job"],
        "tied": [job["job"] for job in leaders] if len(leaders) > 1 else [],
        "failed": [job["job"] for job in jobs if not job["ok"]],
        "ranking": "highest overall success_rate, then mean_reward",
    }
    (Path(sweep_dir) / "sweep.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (Path(sweep_dir) / "sweep.md").write_text(render_summary(summary), encoding="utf-8")
    return summary


def _relative(job: dict[str, Any], sweep_dir: str) -> str:
    report = Path(job.get("run_dir") or Path(job["dir"]) / "run") / "report.md"
    return os.path.relpath(report, sweep_dir)


def _best_line(summary: dict[str, Any]) -> str:
    if summary["best"] is not None:
        return f"Best: job {summary['best']} ({summary['ranking']})."
    if summary.get("tied"):
        return (f"Best: none, jobs {', '.join(map(str, summary['tied']))} tie on {summary['ranking']}; "
                "more rows or samples per job would tell them apart.")
    return "Best: none (no job finished with a report)."


def render_summary(summary: dict[str, Any]) -> str:
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    lines = [
        f"# agentcore-rl sweep — {len(summary['jobs'])} job(s), {len(summary['failed'])} failed",
        "",
        _best_line(summary),
        "",
        "| job | overrides | status | success [95% CI] | n | mean reward | delta | report |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for job in summary["jobs"]:
        metrics = job["metrics"]
        ci = metrics.get("success_ci") or [None, None]
        reward = metrics.get("mean_reward")
        delta = metrics.get("delta")
        status = "ok" if job["ok"] else f"FAILED ({job.get('error') or 'no report'})"
        overrides = " ".join(job["overrides"]).replace("|", "\\|") or "—"
        lines.append(
            f"| {job['job']}{' **best**' if job['best'] else ''} | `{overrides}` | {status} | "
            f"{pct(metrics.get('success_rate'))} [{pct(ci[0])}, {pct(ci[1])}] | "
            f"{metrics.get('n', 0)} | {'n/a' if reward is None else f'{reward:.3f}'} | "
            f"{'—' if delta is None else f'{100 * delta:+.1f}pp'} | "
            f"{_relative(job, summary['sweep_dir'])} |"
        )
    return "\n".join(lines) + "\n"
