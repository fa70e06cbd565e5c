"""Feeding the experiment trackers of `logger=...`: one fan-out, with the failure policy.

`Tracking.open` opens each configured tracker (`trackers/`); the run calls it with the composed
config, every trainer step's line of train/steps.jsonl, each eval phase's summary and, at the
end, the report's numbers and files. Metrics are flattened the same way for every tracker
(`step_metrics`, `report_metrics`), so what a tracker shows is exactly what the run directory
holds. A tracker that raises is reported in one line and dropped: the run and its own files go
on unchanged (a tracker is a view, never the record).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import Rollout
from ..reports.model import DeltaReport, PhaseReport, Report, Summary
from ..trackers.base import SweepJob, TrackedRun, Tracker
from .finish import git_sha, versions

REPORT_FILES = ("report.json", "report.md", "report.html", "junit.xml")


def flatten(values: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    """Numbers of a nested mapping as `prefix/key/subkey`; None and text are left out."""
    for key, value in values.items():
        name = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, name)
        elif isinstance(value, bool):
            yield name, float(value)
        elif isinstance(value, (int, float)):
            yield name, float(value)


def step_metrics(line: Mapping[str, Any]) -> dict[str, float]:
    """One line of train/steps.jsonl as tracker metrics (`train/loss`, `train/wall_time_s/total`)."""
    return dict(flatten({k: v for k, v in line.items() if k != "step"}, "train"))


def summary_metrics(summary: Summary, prefix: str) -> dict[str, float]:
    rate, reward = summary.success_rate, summary.mean_reward
    values: dict[str, Any] = {
        "success_rate": rate.value, "success_rate_ci_low": rate.ci_low, "success_rate_ci_high": rate.ci_high,
        "n": rate.n, "mean_reward": reward.value, "mean_reward_ci_low": reward.ci_low,
        "mean_reward_ci_high": reward.ci_high, "rollouts": summary.rollouts,
        "failures": dict(summary.failures),
        "pass_at": dict(summary.pass_at_k), "tokens": summary.tokens.model_dump(),
    }
    return dict(flatten(values, prefix))


def phase_metrics(phase: str, report: PhaseReport) -> dict[str, float]:
    """`<phase>/overall/...` and `<phase>/task/<task>/...`."""
    metrics = summary_metrics(report.overall, f"{phase}/overall")
    for task, summary in report.tasks.items():
        metrics.update(summary_metrics(summary, f"{phase}/task/{task}"))
    return metrics


def delta_metrics(delta: DeltaReport) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for subject, value in [("overall", delta.overall), *((f"task/{t}", d) for t, d in delta.tasks.items())]:
        metrics.update(flatten(value.model_dump(), f"delta/{subject}"))
    return metrics


def report_metrics(report: Report) -> dict[str, float]:
    """The report's per-task results: pre/post/delta in `run` mode, else the items' phase."""
    if report.pre is not None and report.post is not None:
        metrics = {**phase_metrics("pre", report.pre), **phase_metrics("post", report.post)}
        if report.delta is not None:
            metrics.update(delta_metrics(report.delta))
        return metrics
    return phase_metrics(report.run.mode, PhaseReport(overall=report.overall, tasks=report.tasks))


def pre_eval_metrics(rollouts: Sequence[Rollout], seed: int) -> dict[str, float]:
    """The pre-eval's results as soon as it is done, computed as report.json will compute them."""
    from ..reports.build import deduplicate, summarize, summarize_by_task

    pre, retried = deduplicate([r for r in rollouts if r.phase == "pre"])
    report = PhaseReport(overall=summarize(pre, retried=retried, seed=seed),
                         tasks=summarize_by_task(pre, retried=retried, seed=seed))
    return phase_metrics("pre", report)


def run_tags(rootdir: Path) -> dict[str, str]:
    """The run's git sha (when `rootdir` is in a git checkout) and package versions."""
    sha = git_sha(rootdir)
    return {**({"git_sha": sha} if sha else {}),
            **{f"version/{name}": value for name, value in versions().items()}}


@dataclass
class Tracking:
    trackers: dict[str, Tracker]
    write: Callable[[str], None]
    failed: dict[str, str] = field(default_factory=dict)  # tracker -> what failed

    @classmethod
    def open(cls, configs: Mapping[str, Any], *, run: TrackedRun, write: Callable[[str], None]) -> "Tracking":
        from ..trackers.registry import tracker_module

        tracking = cls(trackers={}, write=write)
        for name, config in configs.items():
            tracker = tracking._call(name, "start", lambda: tracker_module(name).open_tracker(config=config, run=run))
            if tracker is not None:
                tracking.trackers[name] = tracker
        return tracking

    @classmethod
    def start(cls, configs: Mapping[str, Any], *, run_dir: Path, mode: str, rootdir: Path,
              config: Mapping[str, Any], steps: Sequence[Mapping[str, Any]],
              write: Callable[[str], None]) -> "Tracking":
        """Open the trackers, log the config (tagged with the run, its git sha and package
        versions) and the steps a resumed run already has."""
        run = TrackedRun(run_id=run_dir.name, run_dir=run_dir, mode=mode, rootdir=rootdir,
                         sweep=SweepJob.from_environ())
        tracking = cls.open(configs, run=run, write=write)
        tags = {"run_id": run.run_id, "run_dir": str(run_dir), "mode": mode, **run_tags(rootdir)}
        tracking.config(config, tags)
        for line in steps:
            tracking.step(line)
        return tracking

    def end(self, *, report: Report | None, train_steps: Sequence[Mapping[str, Any]], run_dir: Path,
            failed: bool) -> None:
        """The run's end: the report's numbers (at the last trained step, steps counting from 1;
        0 without training) and its files when there is a report, then each tracker's finish."""
        if report is not None:
            step = max((int(line["step"]) for line in train_steps), default=0)
            self.summary(report_metrics(report), step=step)
            self.artifacts(run_dir)
        self.finish(failed=failed)

    def _call(self, name: str, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # a tracker's failure (network, quota, a bug) never stops the run
            self.failed[name] = f"{what}: {type(exc).__name__}: {exc}"
            self.trackers.pop(name, None)
            self.write(f"agentcore-rl warning: logger={name} failed ({what}: {type(exc).__name__}: "
                       f"{exc}); the run goes on without it, its run directory has everything")
            return None

    def _each(self, what: str, call: Callable[[Tracker], Any]) -> None:
        for name, tracker in list(self.trackers.items()):
            self._call(name, what, lambda: call(tracker))

    def config(self, config: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        self._each("log config", lambda t: t.log_config(config=config, tags=tags))

    def step(self, line: Mapping[str, Any]) -> None:
        metrics = step_metrics(line)
        self._each("log step", lambda t: t.log_step(step=int(line["step"]), metrics=metrics))

    def summary(self, metrics: Mapping[str, float], *, step: int) -> None:
        self._each("log summary", lambda t: t.log_summary(step=step, metrics=metrics))

    def artifacts(self, run_dir: Path) -> None:
        paths = [run_dir / name for name in REPORT_FILES if (run_dir / name).is_file()]
        links = {"run_dir": str(run_dir), **{f"report/{p.name}": str(p) for p in paths}}
        self._each("log artifacts", lambda t: t.log_artifacts(paths=paths, links=links))

    def finish(self, *, failed: bool) -> None:
        self._each("finish", lambda t: t.finish(failed=failed))
        self.trackers.clear()
