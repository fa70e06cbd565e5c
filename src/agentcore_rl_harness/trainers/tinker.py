"""`trainer=tinker`: GRPO through the Tinker training API (managed LoRA; also SkyRL's server).

The service owns the weights. One step: `grpo.build_batch` (failure policy, advantages) ->
`datum.token_data` (input/target layout) -> `tinker.Datum`s -> `forward_backward` with a built-in
policy loss -> `optim_step` -> `save_weights_and_get_sampling_client`, whose client the gateway's
`TinkerSampler` samples from under the next policy version.

Every SDK call runs in a worker thread through the SDK's synchronous surface (`.result()` on the
returned future), which tinker 0.24/0.25 (SkyRL's SDKs) and 0.38 share; the harness's event loop
never blocks on the service. The SDK is imported when a trainer is built.

What the algorithm config maps to (anything else is rejected, see `check_algo`):
- `algo.normalize_std` / `std_eps`: used by `build_batch` here, as in the local trainer.
- `algo.aggregation`: Tinker's losses are sums over tokens, so each datum's advantages are
  scaled (1 / trained tokens for token_mean, ...) to give exactly the aggregated loss.
- `algo.clip_low` / `clip_high`: `loss_fn=ppo` thresholds 1 - clip_low and 1 + clip_high.
- `algo.tis_cap`: `loss_fn=cispo` with thresholds (0, tis_cap): the same gradient as truncated
  IS, min(r, cap) * A * grad log p (the reported loss value is CISPO's, not TIS's).
- `algo.kl_coef > 0`: no reference-policy KL in the service's losses -> rejected.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, HarnessError
from .base import StepMetrics, TrainGroup, Trainer, TrainerNode
from . import checkpoint
from .checkpoint import CheckpointError
from .datum import TokenDatum, token_data
from .grpo import GRPOConfig, build_batch, staleness, step_metrics
from .ratios import logprob_stats

log = logging.getLogger(__name__)

LOSS_FNS = ("ppo", "importance_sampling", "cispo")
CHECKPOINT_FILE = "tinker_checkpoint.json"
CHECKPOINT_FORMAT = 1


class TinkerServiceError(HarnessError):
    """A call to the Tinker (or SkyRL) service failed."""


@dataclass(frozen=True)
class TinkerTrainerConfig(TrainerNode):
    """The `trainer` config group for `trainer=tinker`.

    The API key is read from the environment variable named by `api_key_env`, never from the
    config: the run's config.yaml and report.json hold the resolved config verbatim.
    """

    kind: str = "tinker"
    base_url: str | None = None
    """The service URL; null = $TINKER_BASE_URL, else the SDK's default (Tinker's API)."""
    api_key_env: str = "TINKER_API_KEY"
    """Name of the environment variable holding the API key (unset = the SDK's stored credentials)."""
    base_model: str | None = None
    """The service's model name; null = `model.name` (the tokenizer must match it)."""
    lora_rank: int = 32  # the service's LoRA adapter rank
    lora_seed: int | None = None
    """Seeds the LoRA initialisation on the service; null = random."""
    lr: float = 4e-5  # the learning rate (Adam)
    adam_beta1: float = 0.9  # Adam's decay of the gradient's running mean
    adam_beta2: float = 0.95  # Adam's decay of the squared gradient's running mean
    adam_eps: float = 1e-8  # Adam's epsilon, added to the denominator for stability
    weight_decay: float = 0.0  # decoupled weight decay (AdamW); 0 = none
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm on the service; null = no clipping."""
    loss_fn: str = "ppo"
    """ppo (clipped, algo.clip_low/high) | importance_sampling (unclipped; clip_* unused) |
    cispo (needs algo.tis_cap: truncated-IS gradient)."""
    request_timeout_s: float = 1800.0
    """Longest wait for one service call (a queued forward_backward on a busy cluster is slow)."""

    def __post_init__(self) -> None:
        if self.loss_fn not in LOSS_FNS:
            raise ConfigError(
                f"trainer.loss_fn={self.loss_fn!r} is not supported; valid choices: {list(LOSS_FNS)}"
            )
        if self.lr <= 0 or self.lora_rank < 1 or self.request_timeout_s <= 0:
            raise ConfigError(
                f"trainer.lr={self.lr}, trainer.lora_rank={self.lora_rank} and "
                f"trainer.request_timeout_s={self.request_timeout_s} must be > 0"
            )
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1) or self.adam_eps <= 0:
            raise ConfigError(
                f"trainer.adam_beta1={self.adam_beta1} and trainer.adam_beta2={self.adam_beta2} must "
                f"be in [0, 1) and trainer.adam_eps={self.adam_eps} > 0"
            )
        if self.weight_decay < 0 or (self.max_grad_norm is not None and self.max_grad_norm <= 0):
            raise ConfigError(
                f"trainer.weight_decay={self.weight_decay} must be >= 0 and trainer.max_grad_norm="
                f"{self.max_grad_norm} > 0 (or null for no clipping)"
            )
        if not self.api_key_env:
            raise ConfigError("trainer.api_key_env must name an environment variable (e.g. TINKER_API_KEY)")

    def check_algo(self, algo: GRPOConfig) -> None:
        """Called when the config is composed (config.build_trainer_section): fail before any run."""
        check_algo(self, algo)


def check_algo(config: TinkerTrainerConfig, algo: GRPOConfig) -> None:
    """Reject algorithm settings the service's built-in losses cannot honour."""
    name = f"trainer={config.kind}"
    if algo.kl_coef > 0:
        raise ConfigError(
            f"{name}: algo.kl_coef={algo.kl_coef} asks for a KL penalty against the initial policy, "
            "which the service's built-in losses do not have; set algo.kl_coef=0 (or use trainer=local)"
        )
    if algo.tis_cap is not None and config.loss_fn != "cispo":
        raise ConfigError(
            f"{name}: algo.tis_cap={algo.tis_cap} asks for truncated importance sampling, which "
            f"trainer.loss_fn={config.loss_fn} does not do; set trainer.loss_fn=cispo (the same "
            "gradient, min(ratio, cap) * advantage) or algo.tis_cap=null"
        )
    if config.loss_fn == "cispo" and algo.tis_cap is None:
        raise ConfigError(
            f"{name}: trainer.loss_fn=cispo truncates the importance ratio at algo.tis_cap, which is "
            "null; set algo.tis_cap (e.g. 2.0) or trainer.loss_fn=ppo"
        )


def loss_fn_config(config: TinkerTrainerConfig, algo: GRPOConfig) -> dict[str, float] | None:
    """The `loss_fn_config` of forward_backward: Tinker's thresholds are bounds on the ratio."""
    if config.loss_fn == "ppo":
        return {"clip_low_threshold": 1.0 - algo.clip_low, "clip_high_threshold": 1.0 + algo.clip_high}
    if config.loss_fn == "cispo":
        return {"clip_low_threshold": 0.0, "clip_high_threshold": float(algo.tis_cap)}
    return None


def advantage_scale(datum: TokenDatum, *, aggregation: str, total_tokens: int, sequences: int) -> float:
    """The factor that turns the service's summed token loss into `algo.aggregation`."""
    if aggregation == "token_mean":
        return 1.0 / total_tokens
    if aggregation == "seq_mean_token_mean":
        return 1.0 / (sequences * max(datum.trained_tokens, 1))
    return 1.0 / sequences


def to_tinker_datum(tinker: Any, datum: TokenDatum, *, scale: float = 1.0) -> Any:
    """One `TokenDatum` as a real `tinker.Datum` for the RL losses (advantages 0 off the mask)."""
    import numpy as np

    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints([int(token) for token in datum.input_tokens]),
        loss_fn_inputs={
            "target_tokens": np.asarray(datum.target_tokens, dtype=np.int64),
            "logprobs": np.asarray(datum.logprobs, dtype=np.float32),
            "advantages": np.asarray([value * scale for value in datum.advantages], dtype=np.float32),
        },
    )


def settle(value: Any, timeout: float | None = None) -> Any:
    """The value behind a tinker future (0.38 returns futures, 0.25 some objects directly)."""
    result = getattr(value, "result", None)
    return result(timeout) if callable(result) else value


def _tensor_values(tensor: Any) -> list[float]:
    return [float(value) for value in (tensor.tolist() if hasattr(tensor, "tolist") else tensor.data)]


def _metric(metrics: dict[str, float] | None, *names: str) -> float | None:
    for name in names:
        if metrics and name in metrics and metrics[name] is not None:
            return float(metrics[name])
    return None


def summed_token_loss(outputs: Sequence[Any]) -> float | None:
    """The sum of the per-token `elementwise_loss` outputs, for a service that reports no loss
    metric (SkyRL's forward_backward returns empty metrics); the advantages were scaled so that
    this sum is the aggregated loss. None when any datum lacks them."""
    if not outputs or not all("elementwise_loss" in entry for entry in outputs):
        return None
    return sum(sum(_tensor_values(entry["elementwise_loss"])) for entry in outputs)


class TinkerTrainer(Trainer):
    """GRPO steps on a Tinker-compatible service; `.sampler` serves its current weights."""

    def __init__(
        self,
        *,
        config: TinkerTrainerConfig,
        algo: GRPOConfig,
        base_model: str,
        service_client: Any = None,
        api_key: str | None = None,
    ) -> None:
        from ..samplers.tinker import TinkerSampler, import_tinker

        check_algo(config, algo)
        self._tinker = import_tinker()
        self.config = config
        self.algo = algo
        self.base_model = base_model
        self.step_count = 0
        self.policy_version = 0
        self._closed = False
        connect = {key: value for key, value in (("base_url", config.base_url), ("api_key", api_key)) if value}
        self.service = service_client or self._call("connect", lambda: self._tinker.ServiceClient(**connect))
        self.training_client = self._call(
            "create_lora_training_client",
            lambda: self.service.create_lora_training_client(
                base_model=base_model, rank=config.lora_rank, seed=config.lora_seed
            ),
        )
        sampling_client = self._call(
            "save_weights_and_get_sampling_client", self.training_client.save_weights_and_get_sampling_client
        )
        self.sampler = TinkerSampler(sampling_client, policy_version=self.policy_version)

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """Run one blocking SDK call; SDK failures become `TinkerServiceError`."""
        try:
            return settle(call(), self.config.request_timeout_s)
        except self._tinker.TinkerError as exc:
            where = self.config.base_url or os.environ.get("TINKER_BASE_URL") or "the default Tinker API"
            raise TinkerServiceError(
                f"trainer={self.config.kind}: {what} on {where} (model {self.base_model!r}) failed: "
                f"{type(exc).__name__}: {exc}; check trainer.base_url (or TINKER_BASE_URL), the key in "
                f"${self.config.api_key_env} and trainer.base_model, then rerun (--agentcore-rl-resume "
                "continues from the last checkpoint)"
            ) from exc

    async def step(self, *, groups: Sequence[TrainGroup]) -> StepMetrics:
        """One GRPO update on the service, then the sampler moves to the new weights."""
        started = time.perf_counter()
        items, stats = build_batch(groups, normalize_std=self.algo.normalize_std, eps=self.algo.std_eps)
        lags = staleness(items, self.policy_version)
        self.step_count += 1
        result: dict[str, Any] = {}  # nothing trained: no loss-side numbers
        if items:
            result = await asyncio.to_thread(self._update, token_data(items))
        return step_metrics(
            step=self.step_count, policy_version=self.policy_version, stats=stats, lags=lags,
            started=started, lr=self.config.lr, **result,
        )

    def _update(self, data: list[TokenDatum]) -> dict[str, Any]:
        config, algo = self.config, self.algo
        total_tokens = sum(datum.trained_tokens for datum in data)
        batch = [
            to_tinker_datum(self._tinker, datum, scale=advantage_scale(
                datum, aggregation=algo.aggregation, total_tokens=total_tokens, sequences=len(data)))
            for datum in data
        ]
        adam = self._tinker.AdamParams(
            learning_rate=config.lr, beta1=config.adam_beta1, beta2=config.adam_beta2, eps=config.adam_eps,
            weight_decay=config.weight_decay, grad_clip_norm=config.max_grad_norm or 0.0,
        )
        client = self.training_client
        # Both requests are submitted before waiting, so they land in the same service clock cycle.
        forward = client.forward_backward(batch, config.loss_fn, loss_fn_config(config, algo))
        optim = client.optim_step(adam)
        output = self._call("forward_backward", lambda: forward)
        optim_output = self._call("optim_step", lambda: optim)
        sampling_client = self._call(
            "save_weights_and_get_sampling_client", client.save_weights_and_get_sampling_client
        )
        self.policy_version += 1
        self.sampler.publish_weights(sampling_client, policy_version=self.policy_version)
        outputs = getattr(output, "loss_fn_outputs", None) or []
        policy_logprobs = None
        if len(outputs) == len(data) and all("logprobs" in entry for entry in outputs):
            policy_logprobs = [_tensor_values(entry["logprobs"]) for entry in outputs]
        stats = logprob_stats(data, policy_logprobs, loss_fn=config.loss_fn, clip_low=algo.clip_low,
                              clip_high=algo.clip_high, tis_cap=algo.tis_cap)
        loss = _metric(getattr(output, "metrics", None), "loss:sum", "loss:mean", "loss")
        return dict(
            loss=loss if loss is not None else summed_token_loss(outputs),
            sampler_kl=stats.sampler_kl,
            clip_fraction=stats.clip_fraction,
            grad_norm=_metric(getattr(optim_output, "metrics", None), "grad_norm", "grad_norm:mean",
                              "optim/grad_norm", "skyrl.ai/grad_norm"),
        )

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """`save_state` on the service; the directory gets the returned path, step and version."""
        folder = Path(path)
        name = f"arl-step-{self.step_count:05d}-v{self.policy_version}"
        saved = self._call("save_state", lambda: self.training_client.save_state(name))
        record = {
            "format": CHECKPOINT_FORMAT,
            "trainer": self.config.kind,
            "tinker_path": saved.path,
            "step": self.step_count,
            "policy_version": self.policy_version,
            "base_model": self.base_model,
            "lora_rank": self.config.lora_rank,
        }
        checkpoint.write_json_dir(folder, CHECKPOINT_FILE, record)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> int:
        """A new training client from the saved state (weights and optimizer); returns its step."""
        record = read_checkpoint(path)
        if record["base_model"] != self.base_model or record["lora_rank"] != self.config.lora_rank:
            raise CheckpointError(
                f"checkpoint {path} is of {record['base_model']!r} with LoRA rank {record['lora_rank']}; "
                f"this trainer runs {self.base_model!r} with rank {self.config.lora_rank}; use the same "
                "trainer.base_model and trainer.lora_rank"
            )
        self.training_client = self._call(
            "create_training_client_from_state_with_optimizer",
            lambda: self.service.create_training_client_from_state_with_optimizer(record["tinker_path"]),
        )
        sampling_client = self._call(
            "save_weights_and_get_sampling_client", self.training_client.save_weights_and_get_sampling_client
        )
        self.step_count = int(record["step"])
        self.policy_version = int(record["policy_version"])
        self.sampler.publish_weights(sampling_client, policy_version=self.policy_version)
        return self.step_count

    def close(self) -> None:
        """Finish the service session (tinker >= 0.38); idempotent."""
        if self._closed:
            return
        self._closed = True
        close = getattr(self.service, "close", None)
        if close is None:
            return
        try:
            settle(close("success"), 30.0)
        except Exception as exc:  # the run is over; a failed goodbye must not hide its result
            log.warning("trainer=%s: closing the service session failed: %s", self.config.kind, exc)


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    file = Path(path) / CHECKPOINT_FILE
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the Tinker checkpoint record {file}: {exc}; pass a "
                              "checkpoint directory written by trainer=tinker/skyrl") from exc
    missing = sorted({"format", "tinker_path", "step", "policy_version", "base_model", "lora_rank"} - set(record))
    if missing or record["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{file} is not a format-{CHECKPOINT_FORMAT} Tinker checkpoint record (missing {missing}, "
            f"format {record.get('format')!r}); resume with the trainer that wrote it"
        )
    return record


def api_key_from_env(config: TinkerTrainerConfig) -> str | None:
    return os.environ.get(config.api_key_env) or None


def warn_sampling_temperature(kind: str, temperature: float) -> None:
    if temperature != 1.0:
        log.warning(
            "trainer=%s: sampling.temperature=%s; the service's losses score tokens at temperature 1, "
            "so the importance ratio compares different distributions (watch sampler_kl in "
            "train/steps.jsonl); set sampling.temperature=1.0 to train on-policy",
            kind, temperature,
        )


def build_trainer(*, section: Any, model_dir: Any, tokenizer: Any, config: Any) -> TinkerTrainer:
    """The registry's factory for `trainer=tinker` (see `trainers/registry.py`)."""
    trainer_config: TinkerTrainerConfig = section.trainer
    check_algo(trainer_config, section.algo)
    warn_sampling_temperature(trainer_config.kind, config.sampling.temperature)
    return TinkerTrainer(
        config=trainer_config,
        algo=section.algo,
        base_model=trainer_config.base_model or config.model.name,
        api_key=api_key_from_env(trainer_config),
    )
