"""`trainer=sagemaker` (experimental): GRPO on Amazon SageMaker Training Sessions.

A managed LoRA service in the SageMaker Python SDK (`sagemaker-train` 1.27,
`sagemaker.train.training_session`), shaped like Tinker: a `ServiceClient` (region, execution
role, model package group, S3 output) creates a training session (`CreateTrainingSession`) and
returns a `TrainingClient`; each step here is

    build_batch -> datum.token_data -> SDK `Datum`s -> forward_backward(importance_sampling | ppo)
    -> optim_step(AdamParams) -> save_weights_and_get_sampling_client -> sampler.swap

`forward_backward` / `optim_step` / saves are `ExecuteTrainingOperation` calls on the
`sagemakertrainingsessionruntime` service, polled with `GetTrainingOperationResult`; the weight
sync registers a model package version and points sampling at it (`loadWeightsForSampling`).
Checkpoints are `save_state` model packages; the run directory keeps only their ARN.

A live session bills, so it is stopped (`StopTrainingSession`) exactly once on every exit path:
`close()` (the harness calls it on normal exit, on an exception and on Ctrl-C), a failed step,
SIGTERM (a chained handler stops it, then the previous handler runs: the plugin's turns it into
KeyboardInterrupt, the default one kills the process), and an `atexit` hook as a last resort.
The SDK's own garbage-collection stop stays armed behind all of these. Only SIGKILL / os._exit
leave it running (until the service's inactivity timeout).

Long because `SageMakerTrainer` is one object's state: the live session, its stop-exactly-once
guarantee across every exit path (close, a failed step, the chained SIGTERM handler, atexit) and
the step pipeline all share the one `TrainingClient` and its stop flag; split, that state would be
spread across modules. Batch building, datums, checkpoints and sampler ratios already live in
`grpo.py`, `datum.py`, `checkpoint.py` and `ratios.py`.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, HarnessError
from ..samplers.sagemaker import SageMakerSampler, import_training_session, service_errors
from .base import StepMetrics, TrainGroup, Trainer, TrainerNode
from . import checkpoint
from .checkpoint import STATE_FILE, CheckpointError
from .datum import TokenDatum, token_data
from .grpo import GRPOConfig, build_batch, staleness, step_metrics
from .ratios import logprob_stats

logger = logging.getLogger(__name__)

LOSS_FUNCTIONS = ("importance_sampling", "ppo")
CHECKPOINT_FORMAT = "sagemaker-training-session/1"
REQUIRED_KEYS = ("region", "role_arn", "model_package_group", "s3_output_path")


@dataclass(frozen=True)
class SageMakerTrainerConfig(TrainerNode):
    """The `trainer` config group for `trainer=sagemaker`."""

    kind: str = "sagemaker"
    region: str | None = None
    """AWS Region with Training Sessions (required)."""
    role_arn: str | None = None
    """Execution role the session runs as (required)."""
    model_package_group: str | None = None
    """Model package group ARN where weights and checkpoints are registered (required)."""
    s3_output_path: str | None = None
    """s3:// prefix for the session's outputs (required)."""
    base_model: str | None = None
    """SageMaker Hub content ARN of the base model (or an id from `list_base_models()`)."""
    resume_model_package: str | None = None
    """A `save_state` model package ARN to start from instead of `base_model` (weights + optimizer)."""
    lora_rank: int = 32  # the LoRA adapter's rank
    lora_alpha: int = 64  # the LoRA adapter's scale is lora_alpha / lora_rank
    loss_fn: str = "importance_sampling"
    """importance_sampling | ppo (PPO clips with algo.clip_low / algo.clip_high)."""
    lr: float = 1e-4  # the learning rate (Adam)
    adam_beta1: float = 0.9  # Adam's decay of the gradient's running mean
    adam_beta2: float = 0.999  # Adam's decay of the squared gradient's running mean
    adam_eps: float = 1e-8  # Adam's epsilon, added to the denominator for stability
    weight_decay: float = 0.0  # decoupled weight decay (AdamW); 0 = none
    max_grad_norm: float | None = 1.0
    """Gradient clipping norm sent with each optim_step; null = the service's default."""
    temperature: float = 1.0
    """The sampler's temperature; must be 1.0 (the service's logprob temperature is undocumented)."""
    session_name_prefix: str = "agentcore-rl"  # the training session's name starts with it
    kms_key_arn: str | None = None  # a KMS key encrypting what is saved to s3_output_path; null = the default
    vpc_subnets: tuple[str, ...] = ()  # subnet ids to run the training in a VPC; empty = no VPC
    vpc_security_group_ids: tuple[str, ...] = ()  # with vpc_subnets: the security groups
    operation_timeout_s: float = 3600.0
    """How long to wait for one forward_backward / optim_step / save before failing the step."""

    def __post_init__(self) -> None:
        missing = [key for key in REQUIRED_KEYS if not getattr(self, key)]
        if not self.base_model and not self.resume_model_package:
            missing.append("base_model (or resume_model_package)")
        if missing:
            keys = ", ".join(f"trainer.{key}" for key in missing)
            raise ConfigError(
                f"trainer=sagemaker needs {keys}; set them in your config or with --agentcore-rl-set "
                "trainer.<key>=<value> (see docs/trainers.md, 'trainer=sagemaker')"
            )
        if self.loss_fn not in LOSS_FUNCTIONS:
            raise ConfigError(f"trainer.loss_fn={self.loss_fn!r} is not supported; valid choices: "
                              f"{list(LOSS_FUNCTIONS)}")
        if not self.model_package_group.startswith("arn:") or ":model-package-group/" not in self.model_package_group:
            raise ConfigError(f"trainer.model_package_group={self.model_package_group!r} must be a model "
                              "package group ARN (arn:aws:sagemaker:<region>:<account>:model-package-group/<name>)")
        if not self.s3_output_path.startswith("s3://"):
            raise ConfigError(f"trainer.s3_output_path={self.s3_output_path!r} must start with s3://")
        if self.lora_rank < 1 or self.lora_alpha < 1 or self.lr <= 0 or self.operation_timeout_s <= 0:
            raise ConfigError(
                f"trainer.lora_rank={self.lora_rank}, trainer.lora_alpha={self.lora_alpha}, trainer.lr="
                f"{self.lr} and trainer.operation_timeout_s={self.operation_timeout_s} must all be > 0")
        if self.temperature != 1.0:
            raise ConfigError(
                f"trainer.temperature={self.temperature} (from sampling.temperature): trainer=sagemaker "
                "needs sampling.temperature=1.0, because the service does not document under which "
                "temperature it returns and recomputes logprobs")
        if bool(self.vpc_subnets) != bool(self.vpc_security_group_ids):
            raise ConfigError("trainer.vpc_subnets and trainer.vpc_security_group_ids go together; set both or neither")

    def check_algo(self, algo: GRPOConfig) -> None:
        """Called when the config is composed (config.build_trainer_section): fail before any run."""
        check_algo(algo)


def check_algo(algo: GRPOConfig) -> None:
    """Reject GRPO knobs the service cannot honour, instead of silently ignoring them."""
    if algo.kl_coef > 0:
        raise ConfigError(f"algo.kl_coef={algo.kl_coef}: trainer=sagemaker has no reference-policy KL "
                          "penalty; set algo.kl_coef=0")
    if algo.tis_cap is not None:
        raise ConfigError(f"algo.tis_cap={algo.tis_cap}: trainer=sagemaker has no truncated importance "
                          "sampling; use trainer.loss_fn=importance_sampling (uncapped) or ppo, and algo.tis_cap=null")
    if algo.aggregation != "token_mean":
        raise ConfigError(f"algo.aggregation={algo.aggregation!r}: the service aggregates token losses "
                          "itself and takes no aggregation setting; leave algo.aggregation=token_mean")


def to_sdk_datum(datum: TokenDatum, sdk: Any) -> Any:
    """One `TokenDatum` as the SDK's `Datum` (per-token inputs as long as the model input)."""
    length = len(datum.input_tokens)

    def tensor(values: Sequence[float], dtype: Any) -> Any:
        return sdk.TensorData(data=list(values), dtype=dtype, shape=[length])

    return sdk.Datum(
        model_input=sdk.ModelInput.from_ints(list(datum.input_tokens)),
        loss_fn_inputs={
            "target_tokens": tensor(datum.target_tokens, sdk.TensorDtype.INT64),
            "weights": tensor(datum.mask, sdk.TensorDtype.FLOAT32),
            "logprobs": tensor(datum.logprobs, sdk.TensorDtype.FLOAT32),
            "advantages": tensor(datum.advantages, sdk.TensorDtype.FLOAT32),
        },
    )


class SageMakerTrainer(Trainer):
    """The `Trainer` protocol over one SageMaker training session; see the module docstring."""

    def __init__(self, training_client: Any, *, config: SageMakerTrainerConfig, algo: GRPOConfig,
                 sampler: SageMakerSampler | None = None) -> None:
        check_algo(algo)
        self._sdk = import_training_session()
        self._errors = service_errors()
        self.training_client = training_client
        self.config = config
        self.algo = algo
        self.sampler = sampler or SageMakerSampler(training_client.create_sampling_client())
        self.policy_version = self.sampler.policy_version
        self.step_count = 0
        """The raw metrics of the last forward_backward and optim_step, for debugging."""
        self._busy = threading.Lock()
        self._close_lock = threading.RLock()
        self._closed = False
        self._previous_sigterm: Any = None
        atexit.register(self._close_at_exit)
        self._chain_sigterm()

    @property
    def session_name(self) -> str:
        return str(self.training_client.training_session_name)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- training ----------------------------------------------------------------------------

    async def step(self, *, groups: Sequence[TrainGroup]) -> StepMetrics:
        """One GRPO update on the service (off the event loop), then the weight sync."""
        return await asyncio.to_thread(self.step_sync, groups)

    def step_sync(self, groups: Sequence[TrainGroup]) -> StepMetrics:
        started = time.perf_counter()
        with self._busy:
            self._require_open("step")
            items, stats = build_batch(groups, normalize_std=self.algo.normalize_std, eps=self.algo.std_eps)
            lags = staleness(items, self.policy_version)
            self.step_count += 1
            result: dict[str, Any] = {}  # nothing trained: no loss-side numbers
            if items:
                data = token_data(items)
                result = self._on_failure_stop(lambda: self._update(data))
            return step_metrics(
                step=self.step_count, policy_version=self.policy_version, stats=stats, lags=lags,
                started=started, lr=self.config.lr, **result,
            )

    def _update(self, data: list[TokenDatum]) -> dict[str, Any]:
        sdk, config, timeout = self._sdk, self.config, self.config.operation_timeout_s
        forward_backward = self.training_client.forward_backward(
            [to_sdk_datum(datum, sdk) for datum in data], loss_fn=config.loss_fn,
            loss_fn_config=self._loss_fn_config())
        optim = self.training_client.optim_step(sdk.AdamParams(
            learning_rate=config.lr, beta1=config.adam_beta1, beta2=config.adam_beta2, eps=config.adam_eps,
            weight_decay=config.weight_decay, grad_clip_norm=config.max_grad_norm))
        fb_output, optim_output = forward_backward.result(timeout=timeout), optim.result(timeout=timeout)
        sampling_client = self.training_client.save_weights_and_get_sampling_client(
            description=f"agentcore-rl policy version {self.policy_version + 1}")
        self.policy_version += 1
        self.sampler.publish_weights(sampling_client, policy_version=self.policy_version)
        metrics = {**dict(fb_output.metrics or {}), **{f"optim/{k}": v for k, v in (optim_output.metrics or {}).items()}}
        return dict(
            loss=_metric(metrics, "actor/pg_loss", "loss"),
            kl=None,
            sampler_kl=_sampler_kl(data, fb_output.loss_fn_outputs),
            clip_fraction=_metric(metrics, "actor/pg_clipfrac") if config.loss_fn == "ppo" else None,
            grad_norm=_metric(metrics, "actor/grad_norm", "grad_norm", "optim/grad_norm"),
        )

    def _loss_fn_config(self) -> dict[str, float] | None:
        # Tinker's convention, which the SDK mirrors: the thresholds bound the ratio itself.
        if self.config.loss_fn != "ppo":
            return None
        return {"clip_low_threshold": 1.0 - self.algo.clip_low, "clip_high_threshold": 1.0 + self.algo.clip_high}

    def _on_failure_stop(self, operation: Any) -> Any:
        """Run a service operation; on any failure stop the session (its op sequence may be wedged)."""
        try:
            return operation()
        except BaseException as exc:
            self._stop_quietly(f"a step failed ({type(exc).__name__})")
            if isinstance(exc, self._errors):
                raise HarnessError(f"SageMaker training session {self.session_name} failed: "
                                   f"{type(exc).__name__}: {exc}; the session was stopped (no more billing). Fix the cause "
                                   "and rerun; --agentcore-rl-resume continues from the last checkpoint") from exc
            raise

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """`save_state` on the service (weights + optimizer); the directory keeps its ARN."""
        with self._busy:
            self._require_open("save a checkpoint")
            response = self._on_failure_stop(lambda: self.training_client.save_state(
                description=f"agentcore-rl step {self.step_count}").result(timeout=self.config.operation_timeout_s))
            if not response.model_package_arn:
                raise HarnessError(f"SageMaker save_state in session {self.session_name} returned no model "
                                   "package ARN; the checkpoint was not saved. Check the execution role can write to "
                                   "trainer.model_package_group, then rerun")
            _write_state(Path(path), {
                "format": CHECKPOINT_FORMAT,
                "step": self.step_count,
                "policy_version": self.policy_version,
                "model_package_arn": response.model_package_arn,
                "training_session_name": self.session_name,
                "base_model": self.config.base_model,
                "loss_fn": self.config.loss_fn,
            })

    def load_checkpoint(self, path: str | os.PathLike[str]) -> int:
        """Load a `save_checkpoint` directory's model package (weights + optimizer) into the session."""
        state = _read_state(Path(path))
        with self._busy:
            self._require_open("load a checkpoint")
            arn = state["model_package_arn"]
            self._on_failure_stop(lambda: self.training_client.load_state_with_optimizer(arn).result(
                timeout=self.config.operation_timeout_s))
            sampling_client = self._on_failure_stop(lambda: self.training_client.save_weights_and_get_sampling_client(
                description=f"agentcore-rl resumed from {arn}"))
            self.step_count = int(state["step"])
            self.policy_version = int(state["policy_version"])
            self.sampler.publish_weights(sampling_client, policy_version=self.policy_version)
            return self.step_count

    # -- the session's lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Stop the training session, once. Later calls do nothing; a failed stop is raised loudly."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._restore_sigterm()
        atexit.unregister(self._close_at_exit)
        try:
            self.training_client.stop()
        except Exception as exc:
            raise HarnessError(
                f"could not stop SageMaker training session {self.session_name} ({type(exc).__name__}: {exc}); "
                f"it keeps billing until stopped: aws sagemaker stop-training-session --region "
                f"{self.config.region} --training-session-name {self.session_name}") from exc
        logger.info("stopped SageMaker training session %s", self.session_name)

    def _stop_quietly(self, reason: str) -> None:
        try:
            self.close()
        except HarnessError as exc:
            logger.error("%s after %s", exc, reason)

    def _close_at_exit(self) -> None:
        self._stop_quietly("interpreter exit")

    def _chain_sigterm(self) -> None:
        """Stop the session on SIGTERM first, then let the previous handler do what it did."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # inherited (a background job): Ctrl-C
            signal.signal(signal.SIGINT, signal.default_int_handler)  # must still stop the session

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        previous = self._previous_sigterm
        self._stop_quietly(f"signal {signum}")
        if callable(previous):
            previous(signum, frame)
        elif previous in (signal.SIG_DFL, None):
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def _require_open(self, action: str) -> None:
        if self._closed:
            raise HarnessError(f"cannot {action}: SageMaker training session {self.session_name} is stopped; "
                               "a stopped trainer cannot be reused: start a new run, or resume from "
                               "trainer.resume_model_package")


def _metric(metrics: dict[str, Any], *names: str) -> float | None:
    for name in names:
        value = metrics.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _sampler_kl(data: list[TokenDatum], outputs: list[dict[str, Any]] | None) -> float | None:
    """k3 KL(policy || sampler) on trained tokens, if the service returned per-token `logprobs`."""
    if not outputs or len(outputs) != len(data):
        return None
    values = []
    for output in outputs:
        found = (output or {}).get("logprobs")
        found = found.get("data") if isinstance(found, dict) else found
        values.append(found if isinstance(found, list) else None)
    return logprob_stats(data, values, loss_fn="importance_sampling").sampler_kl


def _write_state(target: Path, state: dict[str, Any]) -> None:
    checkpoint.write_json_dir(target, STATE_FILE, state)


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder} is not a trainer checkpoint (cannot read {STATE_FILE}: {exc})") from exc
    if state.get("format") != CHECKPOINT_FORMAT or not state.get("model_package_arn"):
        raise CheckpointError(f"checkpoint {folder} was not written by trainer=sagemaker (format "
                              f"{state.get('format')!r}); resume with the trainer that wrote it")
    return state


def open_session(config: SageMakerTrainerConfig) -> Any:
    """Create the training session (blocks until Running) and return its `TrainingClient`."""
    sdk = import_training_session()
    vpc = None
    if config.vpc_subnets:
        vpc = sdk.VpcConfig(subnets=list(config.vpc_subnets), security_group_ids=list(config.vpc_security_group_ids))
    try:
        service = sdk.ServiceClient(
            region=config.region, role_arn=config.role_arn, model_package_group_arn=config.model_package_group,
            s3_output_path=config.s3_output_path, kms_key_arn=config.kms_key_arn, vpc_config=vpc,
            session_name_prefix=config.session_name_prefix)
        options: dict[str, Any] = dict(rank=config.lora_rank, alpha=config.lora_alpha)
        if config.base_model:
            options["base_model"] = config.base_model
        if config.resume_model_package:
            # The SDK stops the session itself if the restore fails.
            return service.create_training_client_from_state_with_optimizer(config.resume_model_package, **options)
        return service.create_lora_training_client(**options)
    except (*service_errors(), ValueError, RuntimeError) as exc:
        raise HarnessError(f"could not start a SageMaker training session in {config.region}: "
                           f"{type(exc).__name__}: {exc}; check trainer.role_arn (assumable by SageMaker, "
                           "with iam:PassRole), trainer.model_package_group, trainer.base_model and the "
                           "Region's training-session quota") from exc


def build_trainer(*, section: Any, model_dir: Any = None, tokenizer: Any = None, config: Any = None) -> SageMakerTrainer:
    """The registry's factory for `trainer=sagemaker` (a `service` trainer; see `trainers/registry.py`)."""
    trainer_config: SageMakerTrainerConfig = section.trainer
    check_algo(section.algo)
    training_client = open_session(trainer_config)
    try:
        sampling_client = (training_client.save_weights_and_get_sampling_client(description="agentcore-rl resume")
                           if trainer_config.resume_model_package else training_client.create_sampling_client())
        trainer = SageMakerTrainer(training_client, config=trainer_config, algo=section.algo,
                                   sampler=SageMakerSampler(sampling_client))
    except BaseException:
        try:
            training_client.stop()
        except Exception:
            logger.exception("could not stop SageMaker training session %s after a failed start",
                             training_client.training_session_name)
        raise
    logger.info("SageMaker training session %s is running", trainer.session_name)
    return trainer
