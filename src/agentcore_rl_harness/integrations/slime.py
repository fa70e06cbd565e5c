"""`trainer=slime`: a custom rollout function and reward post-process for slime.

    --rollout-function-path agentcore_rl_harness.integrations.slime.generate_rollout
    --custom-reward-post-process-path agentcore_rl_harness.integrations.slime.post_process_rewards

`generate_rollout(args, rollout_id, data_source, evaluation=False)` takes slime's prompt groups
(`data_source.get_samples(rollout_batch_size)`, `n_samples_per_prompt` samples each; the
dataset from `agentcore-rl export slime` puts each row's task reference and row in
`metadata["agentcore_rl"]`), plays one harness episode per sample against slime's SGLang
router (`/generate`, through the harness's `SGLangSampler`), scores it with the task, and
returns one slime `Sample` per trace: `tokens`, `response_length`, `loss_mask`,
`rollout_log_probs` (0.0 where the mask is 0), `reward`, `status`, `group_index`, and
`metadata["agentcore_rl"]["rollout_id"]` shared by the traces of one forked rollout.

Groups therefore hold a variable number of samples; slime's default reward normalisation
reshapes by `n_samples_per_prompt`, so use `post_process_rewards`, which normalises per
`group_index` with each rollout counted once (`trainers.grpo.group_advantages`: population std,
unlike slime's default unbiased `torch.std`) and gives every trace its rollout's advantage.

Failures (`trainer.failure_policy`): `drop` (default) leaves a timeout / agent_error /
infra_error rollout out of its group and counts it in the rollout metrics; `raise` stops the step.

Field names mirror slime's `Sample` (slime/utils/types.py at THUDM/slime commit 0d234f3e); when
slime is not importable, `StandInSample` (same names) is used, e.g. in tests.
"""

from __future__ import annotations

import enum
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, HarnessError
from ..records import Rollout, Trace
from ..run.training import training_reward
from ..trainers.base import TrainerNode
from ._episodes import (
    CONFIG_ENV, OVERRIDES_ENV, RolloutRunner, case_for, harness_config, is_failed,
    overrides_from_env, shared_runner, trained_tokens,
)
from ._tasks import load_task

META_KEY = "agentcore_rl"
FAILURE_POLICIES = ("drop", "raise")
NORMALIZED_ESTIMATORS = ("grpo", "gspo", "reinforce_plus_plus_baseline")
STD_ESTIMATORS = ("grpo", "gspo")

EXTERNAL_COMMAND = """trainer=slime is an external trainer: slime's train.py runs the loop and \
calls the harness once per sample, so `--agentcore-rl train` / `run` cannot drive it. Run instead:
  agentcore-rl export slime --task <TASK> --out data/slime
  AGENTCORE_RL_CONFIG=configs python train.py ... \\
    --prompt-data data/slime/train.jsonl --input-key prompt --label-key label \\
    --metadata-key metadata --rollout-batch-size <rows per step> --n-samples-per-prompt <group size> \\
    --rollout-function-path agentcore_rl_harness.integrations.slime.generate_rollout \\
    --custom-reward-post-process-path agentcore_rl_harness.integrations.slime.post_process_rewards \\
    --advantage-estimator grpo
(docs/trainers.md: trainer=slime). `pytest --agentcore-rl eval` works with any trainer for pre/post
evaluation."""


@dataclass(frozen=True)
class SlimeTrainerConfig(TrainerNode):
    """The `trainer` node for `trainer=slime` (read by the rollout function inside slime)."""

    kind: str = "slime"
    failure_policy: str = "drop"
    """`drop`: leave a failed rollout out of its group (counted); `raise`: stop the step."""
    eval_tasks: tuple[str, ...] = ()
    """Task references (`file.py::test_name`) that slime's eval rollouts run (test split)."""
    eval_samples: int = 1
    """Samples per test row in eval rollouts."""
    rollouts_dir: str | None = None
    """If set, every scored rollout is appended to `<dir>/rollouts.jsonl`."""

    def __post_init__(self) -> None:
        if self.failure_policy not in FAILURE_POLICIES:
            raise ConfigError(
                f"trainer.failure_policy={self.failure_policy!r}; valid choices: {list(FAILURE_POLICIES)}"
            )
        if self.eval_samples < 1:
            raise ConfigError(f"trainer.eval_samples={self.eval_samples} must be >= 1")


@dataclass
class StandInSample:
    """The fields of slime's `Sample` this adapter reads and writes (same names and defaults)."""

    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: Any = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    status: "StandInSample.Status" = Status.PENDING
    metadata: dict = field(default_factory=dict)
    session_id: str | None = None


def sample_class() -> type:
    """slime's `Sample` when slime is installed, else `StandInSample`."""
    try:
        from slime.utils.types import Sample
    except ImportError:
        return StandInSample
    return Sample


def trace_sample(rollout: Rollout, trace: Trace, *, template: Any, trace_index: int,
                 group_index: int, sample_cls: type, decode: Any = None) -> Any:
    """One slime sample for one trace of a scored rollout (built on the prompt's sample)."""
    response = list(trace.token_ids[trace.prompt_length:])
    mask = [int(bool(m)) for m in trace.loss_mask]
    info = dict((template.metadata or {}).get(META_KEY) or {})
    info.update(
        rollout_id=rollout.session_id, trace_index=trace_index, traces_in_rollout=len(rollout.traces),
        task=rollout.task, row_id=rollout.row_id, status=rollout.status.value,
        success=rollout.success, rewards=dict(rollout.rewards),
    )
    sample = sample_cls(
        group_index=group_index,
        index=template.index,
        prompt=template.prompt,
        tokens=list(trace.token_ids),
        response=decode(response) if decode is not None else "",
        response_length=len(response),
        label=template.label,
        reward=training_reward(rollout),
        loss_mask=mask,
        rollout_log_probs=[float(lp) if m else 0.0 for m, lp in zip(mask, trace.logprobs)],
        status=sample_cls.Status.TRUNCATED if trace.finish_reason == "length" else sample_cls.Status.COMPLETED,
        metadata={**(template.metadata or {}), META_KEY: info},
        session_id=rollout.session_id,
    )
    versions = trace.metadata.get("policy_versions") or ()
    sample.weight_versions = [str(version) for version in versions]
    return sample


def rollout_samples(rollout: Rollout, *, template: Any, group_index: int, sample_cls: type,
                    decode: Any = None) -> list[Any]:
    """Every trace of `rollout` that trains at least one token, as slime samples."""
    return [
        trace_sample(rollout, trace, template=template, trace_index=index, group_index=group_index,
                     sample_cls=sample_cls, decode=decode)
        for index, trace in enumerate(rollout.traces) if trained_tokens(trace)
    ]


# -- reward post-process ------------------------------------------------------------------------


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """(raw rewards, normalised rewards) per sample: per group, each rollout counted once."""
    from ..trainers.grpo import group_advantages

    reward_key = getattr(args, "reward_key", None)
    raw = [float(s.reward[reward_key] if reward_key else s.reward) for s in samples]
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in NORMALIZED_ESTIMATORS or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    normalize_std = estimator in STD_ESTIMATORS and getattr(args, "grpo_std_normalization", True)
    groups: dict[Any, dict[Any, float]] = {}
    keys = []
    for position, (sample, reward) in enumerate(zip(samples, raw)):
        info = (sample.metadata or {}).get(META_KEY) or {}
        key = info.get("rollout_id") or ("sample", position)
        groups.setdefault(sample.group_index, {}).setdefault(key, reward)
        keys.append((sample.group_index, key))
    advantages: dict[tuple[Any, Any], float] = {}
    for group_index, rollouts in groups.items():
        values = group_advantages(list(rollouts.values()), normalize_std=normalize_std)
        advantages.update({(group_index, key): value for key, value in zip(rollouts, values)})
    return raw, [advantages[key] for key in keys]


# -- the rollout function -------------------------------------------------------------------------

_group_counter = itertools.count()


def _runner(args: Any) -> RolloutRunner:
    """The process's harness for slime's router (slime calls the rollout function every step)."""
    from ..models import load_tokenizer
    from ..samplers.sglang import SGLangSampler

    source = os.environ.get(CONFIG_ENV) or None
    overrides = overrides_from_env(os.environ.get(OVERRIDES_ENV))
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    key = (source, tuple(overrides), url, args.hf_checkpoint, args.rollout_temperature,
           args.rollout_top_p, args.rollout_top_k, args.rollout_max_response_len)

    def build() -> RolloutRunner:
        config = harness_config(
            source=source, overrides=overrides, trainer="slime",
            temperature=float(args.rollout_temperature), top_p=float(args.rollout_top_p),
            top_k=int(args.rollout_top_k), max_tokens_cap=int(args.rollout_max_response_len),
        )
        return RolloutRunner(
            config, sampler=SGLangSampler(url), tokenizer=load_tokenizer(args.hf_checkpoint),
            model_id=str(args.hf_checkpoint), run_id=f"slime-{os.getpid()}",
            rollouts_dir=config.trainer.trainer.rollouts_dir,
        )

    return shared_runner(key, build)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's rollout-function contract: groups of samples (train) or per-dataset results (eval)."""
    runner = _runner(args)
    if evaluation:
        return _eval_rollout(runner, rollout_id)
    groups = data_source.get_samples(args.rollout_batch_size)
    samples, metrics = play_groups(runner, groups, rollout_id=rollout_id)
    return _train_output(samples, metrics)


def play_groups(runner: RolloutRunner, groups: Sequence[Sequence[Any]], *, rollout_id: int,
                decode: Any = None) -> tuple[list[list[Any]], dict[str, float]]:
    """Play every prompt sample of `groups` as one harness episode; apply the failure policy."""
    settings: SlimeTrainerConfig = runner.config.trainer.trainer
    sample_cls = sample_class() if not groups or not groups[0] else type(groups[0][0])
    decode = decode or getattr(runner.tokenizer, "decode", None)
    futures = []
    for position, group in enumerate(groups):
        group_index = group[0].group_index if group and group[0].group_index is not None else next(_group_counter)
        for template in group:
            info = (template.metadata or {}).get(META_KEY) or {}
            if "task_ref" not in info or "row" not in info:
                raise ConfigError(
                    f"slime sample {template.index} has no metadata.{META_KEY}.task_ref/row; build the "
                    "prompt data with `agentcore-rl export slime --task NAME --out DIR` and pass "
                    "--metadata-key metadata"
                )
            case = case_for(load_task(str(info["task_ref"])), json.loads(info["row"]),
                            sample_index=runner.next_sample_index(), phase="train", step=rollout_id)
            futures.append((position, group_index, template, runner.submit(case)))
    out: dict[int, list[Any]] = {}
    dropped = no_tokens = traces = 0
    for position, group_index, template, future in futures:
        rollout = future.result()
        if is_failed(rollout):
            if settings.failure_policy == "raise":
                raise HarnessError(
                    f"task {rollout.task} row {rollout.row_id}: {rollout.status.value}: {rollout.error} "
                    "(trainer.failure_policy=raise)"
                )
            dropped += 1
            continue
        made = rollout_samples(rollout, template=template, group_index=group_index,
                               sample_cls=sample_cls, decode=decode)
        no_tokens += not made
        traces += len(made)
        out.setdefault(position, []).extend(made)
    kept = [out[position] for position in sorted(out)]
    if not kept:
        raise HarnessError(f"rollout {rollout_id}: no rollout produced a trainable trace "
                           f"({dropped} failed, {no_tokens} without sampled tokens)")
    metrics = {f"{META_KEY}/dropped_rollouts": float(dropped),
               f"{META_KEY}/rollouts_without_tokens": float(no_tokens),
               f"{META_KEY}/traces": float(traces),
               f"{META_KEY}/rollouts": float(len(futures))}
    return kept, metrics


def _train_output(samples: list[list[Any]], metrics: dict[str, float]) -> Any:
    try:
        from slime.rollout.base_types import RolloutFnTrainOutput
    except ImportError:
        return samples  # slime's legacy form (a list of groups), accepted by call_rollout_fn
    return RolloutFnTrainOutput(samples=samples, metrics=metrics)


def _eval_rollout(runner: RolloutRunner, rollout_id: int) -> Any:
    """One result per eval task: rewards and truncation flags of its test-split rollouts."""
    from ..tasks import load_rows

    settings: SlimeTrainerConfig = runner.config.trainer.trainer
    if not settings.eval_tasks:
        raise ConfigError(
            "slime asked for an eval rollout but trainer.eval_tasks is empty; set it to task "
            "references (AGENTCORE_RL_SET='trainer.eval_tasks=[path/test_x.py::test_y]') or point "
            "--eval-function-path at slime's own eval"
        )
    sample_cls = sample_class()
    data = {}
    for ref in settings.eval_tasks:
        spec = load_task(ref)
        cases = [case_for(spec, row, sample_index=index, phase="eval", step=rollout_id)
                 for row in load_rows(spec, "test") for index in range(settings.eval_samples)]
        rollouts = [future.result() for future in [runner.submit(case) for case in cases]]
        samples = []
        for rollout in rollouts:
            if is_failed(rollout) or not rollout.traces:
                continue
            template = sample_cls(index=len(samples), prompt="", label=rollout.row_id)
            last = len(rollout.traces) - 1
            samples.append(trace_sample(rollout, rollout.traces[last], template=template,
                                        trace_index=last, group_index=len(samples),
                                        sample_cls=sample_cls))
        data[spec.name] = {
            "rewards": [sample.reward for sample in samples],
            "truncated": [sample.status == sample_cls.Status.TRUNCATED for sample in samples],
            "samples": samples,
        }
    try:
        from slime.rollout.base_types import RolloutFnEvalOutput
    except ImportError:
        return data
    return RolloutFnEvalOutput(data=data)


