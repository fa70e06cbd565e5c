"""The report.json schema (pydantic): the single source for report files and viewers.

`report.schema.json` beside this module is generated from `Report` (`python -m
agentcore_rl_harness.reports.model > report.schema.json`); a test keeps the two equal.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

REPORT_SCHEMA_VERSION = 2
# The report files a run can write (`report.formats`); report.json is always among them.
REPORT_FORMATS = ("json", "md", "html", "junit")
# Which phase the pytest items of each mode are (the phase a report's headline numbers describe).
ITEM_PHASE = {"eval": "eval", "collect": "collect", "run": "post", "train": "train"}
DENOMINATOR_POLICY = (
    "success_rate, pass@k and pass^k count every rollout the agent ran: task_failed, timeout, "
    "limit_exceeded and agent_error are failures; infra_error rollouts (the harness failed, not the "
    "agent), task_error rollouts (the task's own code raised) and judge_error rollouts (the judge "
    "model gave no usable score) are excluded from n and counted under failures; a retried rollout "
    "counts once (its last attempt)"
)


class Interval(BaseModel):
    value: float | None = Field(description="Point estimate (None when n == 0).")
    ci_low: float = Field(description="Lower bound of the 95% Wilson interval.")
    ci_high: float = Field(description="Upper bound of the 95% Wilson interval.")
    n: int = Field(description="Rollouts in the denominator.")


class MeanInterval(BaseModel):
    value: float | None = Field(description="Mean (None when n == 0).")
    ci_low: float | None = Field(description="Lower bound of the 95% percentile bootstrap interval.")
    ci_high: float | None = Field(description="Upper bound of the 95% percentile bootstrap interval.")
    n: int = Field(description="Values averaged.")


class Tokens(BaseModel):
    prompt: int = Field(description="Prompt tokens over all turns.")
    completion: int = Field(description="Sampled tokens over all turns.")
    total: int = Field(description="prompt + completion.")


class Summary(BaseModel):
    rollouts: int = Field(description="Rollout records counted, every status included.")
    rows: int = Field(description="Distinct (task, row) pairs.")
    samples_per_row: int = Field(description="Fewest counted samples of any row (the largest k).")
    success_rate: Interval = Field(description="Share of successful rollouts, see denominator.")
    mean_reward: MeanInterval = Field(description="Mean reward over counted rollouts that have one.")
    reward_means: dict[str, MeanInterval] = Field(
        default_factory=dict,
        description="Per reward function (by name): its mean over counted rollouts that have it.")
    pass_at_k: dict[str, float] = Field(
        description="Unbiased pass@k (at least one of k samples succeeds), averaged over rows.")
    pass_hat_k: dict[str, float] = Field(
        description="Unbiased pass^k (all k samples succeed), averaged over rows.")
    failures: dict[str, int] = Field(description="Rollout counts by non-completed status.")
    tokens: Tokens = Field(description="Token usage reported by the gateway.")
    sessions: int = Field(description="Distinct agent sessions.")
    turns: int = Field(description="Model turns over all rollouts.")
    elapsed_s: float = Field(description="Sum of rollout wall times.")
    mean_elapsed_s: float | None = Field(description="Mean rollout wall time.")
    retried: int = Field(description="Rollouts whose (task, row, sample, phase) ran more than once.")
    denominator: str = Field(default=DENOMINATOR_POLICY, description="How n is counted.")


class RunInfo(BaseModel):
    id: str = Field(description="The run id (the run directory's name).")
    mode: str = Field(description="eval, collect, train or run.")
    config: dict = Field(description="The resolved config.")
    overrides: list[str] = Field(description="Config overrides given on the command line.")
    versions: dict[str, str] = Field(description="Versions of the packages that matter.")
    git_sha: str | None = Field(description="The project's git commit, when in a git checkout.")
    started_at: str = Field(description="UTC start time, ISO 8601 ('' when not recorded).")
    wall_time_s: float = Field(description="Wall time of the session.")


class PhaseReport(BaseModel):
    overall: Summary = Field(description="All tasks together, this phase only.")
    tasks: dict[str, Summary] = Field(description="Per task, this phase only.")
    tags: dict[str, Summary] = Field(default_factory=dict, description="Per task tag, this phase.")


class Delta(BaseModel):
    pre: float | None = Field(description="Success rate of A (before), on the paired rollouts.")
    post: float | None = Field(description="Success rate of B (after), on the paired rollouts.")
    delta: float | None = Field(description="post - pre, in absolute terms (0.25 = +25pp).")
    pairs: int = Field(description="(task, row, sample) pairs present in both.")
    improved: int = Field(description="Pairs that failed before and succeeded after.")
    regressed: int = Field(description="Pairs that succeeded before and failed after.")
    p_value: float = Field(description="Two-sided exact McNemar test on the discordant pairs.")
    reward_pairs: int = Field(default=0, description="Pairs where both rollouts have a reward.")
    reward_delta: float | None = Field(description="Mean reward post - pre on the reward pairs.")
    reward_ci_low: float | None = Field(default=None, description="Paired bootstrap 95% low.")
    reward_ci_high: float | None = Field(default=None, description="Paired bootstrap 95% high.")
    reward_p_value: float | None = Field(
        default=None, description="Two-sided paired bootstrap p-value of the reward change.")


class DeltaReport(BaseModel):
    overall: Delta = Field(description="All tasks together.")
    tasks: dict[str, Delta] = Field(description="Per task.")
    tags: dict[str, Delta] = Field(default_factory=dict, description="Per task tag.")


class TrainStep(BaseModel):
    step: int = Field(description="Training step, from 1 (checkpoints/step-0000N is saved after step N).")
    reward_mean: float | None = Field(description="Mean training reward of the step's rollouts.")
    success_rate: float | None = Field(description="Success rate of the step's rollouts.")
    loss: float | None = Field(description="Policy loss of the step.")
    trained_tokens: int | None = Field(
        default=None, description="Tokens that entered the loss (0: the step changed nothing).")
    informative_fraction: float | None = Field(
        default=None, description="Share of the step's groups whose samples' rewards differed.")
    dropped_stale: int | None = Field(
        default=None, description="trainer.mode=async: samples more than algo.max_staleness versions behind, "
                                  "dropped from their group (None in sync mode).")
    cut_stragglers: int | None = Field(
        default=None, description="algo.stragglers=partial: unfinished samples of the step's partial groups, "
                                  "stopped and never trained (None in sync mode).")
    paced_starts: int | None = Field(
        default=None, description="trainer.mode=async: group starts that waited for the staleness bound.")
    staleness: dict[str, int] | None = Field(
        default=None, description="trainer.mode=async: trained samples by lag in policy versions.")
    sync_s: float | None = Field(
        default=None, description="Seconds the step's weight sync to the sampler took (LoRA push or full reload).")
    reward_spread: float | None = Field(
        default=None, description="Mean within-group std of the training rewards (0: no group could teach).")
    kl_initial: float | None = Field(
        default=None, description="k3 estimate of KL(initial policy || policy after the step) on step 1's tokens.")
    clip_fraction: float | None = Field(
        default=None, description="Share of trained tokens whose importance ratio was clipped or truncated.")
    adapted: list[str] = Field(
        default_factory=list, description="recipe=auto's choices at this step, e.g. algo.group_size=16.")


class TrainingSummary(BaseModel):
    """Whether training had anything to learn from: GRPO learns only from groups whose rewards differ."""

    steps: int = Field(description="Trainer steps recorded.")
    effective_steps: int = Field(description="Steps that trained at least one token (changed the policy).")
    informative_group_fraction: float | None = Field(
        description="Groups whose samples' rewards differed, over every group of every step.")
    trained_tokens: int = Field(description="Tokens that entered the loss over all steps.")
    dropped_stale: int | None = Field(
        default=None, description="trainer.mode=async: samples dropped as too stale over all steps.")
    cut_stragglers: int | None = Field(
        default=None, description="algo.stragglers=partial: stragglers cut from partial groups over all steps.")


class Outcome(BaseModel):
    """One item-phase rollout, enough to pair two runs without their rollouts.jsonl."""

    task: str = Field(description="Task name.")
    row_id: str = Field(description="Dataset row id.")
    sample_index: int = Field(description="Sample of the row.")
    status: str = Field(description="Rollout status.")
    success: bool | None = Field(description="Task success (None for infra_error).")
    reward: float | None = Field(description="Reward, when scored.")
    retried: bool = Field(default=False, description="This rollout ran more than once.")


class RoleUsage(BaseModel):
    """What one model role used: the policy's turns, or a judge's questions (roles.*)."""

    calls: int = Field(description="Model calls made (policy: turns; judge: attempts, retries included).")
    cached: int = Field(default=0, description="Judge questions answered from the cache (no call made).")
    failed_attempts: int = Field(default=0, description="Judge attempts that failed or answered malformed.")
    judge_errors: int = Field(default=0, description="Judge questions that ended without a usable score.")
    prompt_tokens: int = Field(description="Prompt (input) tokens over all calls.")
    completion_tokens: int = Field(description="Completion (output) tokens over all calls.")
    cost_usd: float | None = Field(default=None, description="Cost from roles.<role>.price (None: no price given).")


class GateFailure(BaseModel):
    gate: str = Field(description="The gate, e.g. gates.min_success_rate.")
    subject: str = Field(description="'overall' or a task name.")
    value: float | None = Field(description="The measured value (a delta for regressions).")
    threshold: float = Field(description="The configured limit.")
    p_value: float | None = Field(default=None, description="The paired test's p-value, if any.")
    message: str = Field(description="What failed, by how much, in one line.")


class BaselineComparison(BaseModel):
    """This run against the baseline given with --agentcore-rl-compare, paired by (task, row, sample)."""

    path: str = Field(description="The baseline: its run directory, report.json or saved name.")
    run_id: str = Field(description="The baseline run's id.")
    mode: str = Field(description="The baseline run's mode.")
    hosted: str | None = Field(
        default=None, description="The hosted model the baseline's turns passed through (sampler=hosted), if any.")
    delta: DeltaReport = Field(description="pre = the baseline, post = this run (its items' phase).")
    unpaired: int = Field(description="This run's usable rollouts with no partner in the baseline.")


class Interrupted(BaseModel):
    """The run was stopped (Ctrl-C, SIGTERM) before it finished: what it left on disk."""

    rollouts_on_disk: int = Field(description="Rollouts in rollouts.jsonl, every phase.")
    by_phase: dict[str, int] = Field(description="Those rollouts by phase (pre, warmup, train, post, ...).")
    train_steps: int = Field(default=0, description="Training steps finished (lines in train/steps.jsonl).")
    checkpoint: str | None = Field(default=None, description="The newest checkpoint (resume starts after it).")
    resume: str = Field(description="The command that continues the run where it stopped.")


class Report(BaseModel):
    schema_version: int = Field(default=REPORT_SCHEMA_VERSION, description="report.json version.")
    run: RunInfo = Field(description="What ran, with which config and versions.")
    overall: Summary = Field(description="All tasks together (the pytest items' phase).")
    tasks: dict[str, Summary] = Field(description="Per task (the pytest items' phase).")
    tags: dict[str, Summary] = Field(default_factory=dict, description="Per task tag (items' phase).")
    task_tags: dict[str, list[str]] = Field(default_factory=dict, description="Each task's tags.")
    pre: PhaseReport | None = Field(default=None, description="run mode: before training.")
    post: PhaseReport | None = Field(default=None, description="run mode: after training.")
    delta: DeltaReport | None = Field(default=None, description="run mode: paired pre vs post.")
    warmup: PhaseReport | None = Field(
        default=None, description="run mode with warmup.enabled: after the warm-up, before RL.")
    warmup_delta: DeltaReport | None = Field(
        default=None, description="run mode with a warm-up: paired pre vs after the warm-up.")
    rl_delta: DeltaReport | None = Field(
        default=None, description="run mode with a warm-up: paired after the warm-up vs post (RL's own lift).")
    train: list[TrainStep] | None = Field(default=None, description="The reward curve, per step.")
    training: TrainingSummary | None = Field(
        default=None, description="train / run modes: how many steps trained anything, and why.")
    outcomes: list[Outcome] = Field(
        default_factory=list, description="Per item-phase rollout, for paired comparisons.")
    gates: list[GateFailure] = Field(default_factory=list, description="Gates that failed.")
    roles: dict[str, RoleUsage] = Field(
        default_factory=dict, description="Usage (tokens, calls, cost) per model role: policy, judge.")
    baseline: BaselineComparison | None = Field(
        default=None, description="Set with --agentcore-rl-compare: this run paired with the baseline run.")
    interrupted: Interrupted | None = Field(
        default=None, description="Set when the run was stopped before it finished; how to resume it.")
    recipe: dict[str, Any] | None = Field(
        default=None, description="recipe=auto: each choice (key, value, reason, whether applied, when) and "
                                  "the observations behind them (RUN_DIR/recipe.json).")


def json_schema() -> dict:
    return Report.model_json_schema()


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema_text(), end="")
