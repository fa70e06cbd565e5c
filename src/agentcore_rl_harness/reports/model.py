"""The report.json schema (pydantic): the single source for report files and viewers."""

from __future__ import annotations

from pydantic import BaseModel, Field

REPORT_SCHEMA_VERSION = 1
DENOMINATOR_POLICY = (
    "success_rate counts every rollout the agent ran: task_failed, timeout and agent_error are "
    "failures; infra_error rollouts (the harness failed, not the agent) are excluded from n"
)


class Interval(BaseModel):
    value: float | None = Field(description="Point estimate (None when n == 0).")
    ci_low: float = Field(description="Lower bound of the 95% Wilson interval.")
    ci_high: float = Field(description="Upper bound of the 95% Wilson interval.")
    n: int = Field(description="Rollouts in the denominator.")


class Tokens(BaseModel):
    prompt: int = Field(description="Prompt tokens over all turns.")
    completion: int = Field(description="Sampled tokens over all turns.")


class Summary(BaseModel):
    rollouts: int = Field(description="Rollout records counted, every status included.")
    rows: int = Field(description="Distinct dataset rows.")
    success_rate: Interval = Field(description="Share of successful rollouts, see denominator.")
    mean_reward: float | None = Field(description="Mean reward over rollouts that have one.")
    pass_at_k: dict[str, float] = Field(description="Unbiased pass@k, averaged over rows.")
    failures: dict[str, int] = Field(description="Rollout counts by non-completed status.")
    tokens: Tokens = Field(description="Token usage reported by the gateway.")
    elapsed_s: float = Field(description="Sum of rollout wall times.")
    denominator: str = Field(default=DENOMINATOR_POLICY, description="How n is counted.")


class RunInfo(BaseModel):
    id: str = Field(description="The run id (the run directory's name).")
    mode: str = Field(description="eval, collect, train or run.")
    config: dict = Field(description="The resolved config.")
    overrides: list[str] = Field(description="Config overrides given on the command line.")
    versions: dict[str, str] = Field(description="Versions of the packages that matter.")
    git_sha: str | None = Field(description="The project's git commit, when in a git checkout.")
    started_at: str = Field(description="UTC start time, ISO 8601.")
    wall_time_s: float = Field(description="Wall time of the session.")


class PhaseReport(BaseModel):
    overall: Summary = Field(description="All tasks together, this phase only.")
    tasks: dict[str, Summary] = Field(description="Per task, this phase only.")


class Delta(BaseModel):
    pre: float | None = Field(description="Success rate before training, on the paired rollouts.")
    post: float | None = Field(description="Success rate after training, on the paired rollouts.")
    delta: float | None = Field(description="post - pre, in absolute terms (0.25 = +25pp).")
    pairs: int = Field(description="(row, sample) pairs present in both phases.")
    improved: int = Field(description="Pairs that failed before and succeeded after.")
    regressed: int = Field(description="Pairs that succeeded before and failed after.")
    p_value: float = Field(description="Two-sided exact McNemar test on the discordant pairs.")
    reward_delta: float | None = Field(description="Mean reward post - pre on the pairs.")


class DeltaReport(BaseModel):
    overall: Delta = Field(description="All tasks together.")
    tasks: dict[str, Delta] = Field(description="Per task.")


class TrainStep(BaseModel):
    step: int = Field(description="0-based trainer step.")
    reward_mean: float | None = Field(description="Mean training reward of the step's rollouts.")
    success_rate: float | None = Field(description="Success rate of the step's rollouts.")
    loss: float | None = Field(description="Policy loss of the step.")


class Report(BaseModel):
    schema_version: int = Field(default=REPORT_SCHEMA_VERSION, description="report.json version.")
    run: RunInfo = Field(description="What ran, with which config and versions.")
    overall: Summary = Field(description="All tasks together (the pytest items' phase).")
    tasks: dict[str, Summary] = Field(description="Per task (the pytest items' phase).")
    pre: PhaseReport | None = Field(default=None, description="run mode: before training.")
    post: PhaseReport | None = Field(default=None, description="run mode: after training.")
    delta: DeltaReport | None = Field(default=None, description="run mode: paired pre vs post.")
    train: list[TrainStep] | None = Field(default=None, description="The reward curve, per step.")
