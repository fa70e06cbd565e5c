"""`LocalTrainer`: embedded torch GRPO (LoRA through peft, or full fine-tuning), CPU or GPU.

LoRA layers are injected into the transformers model in place; the in-process `HFLocalSampler`
decodes a copy of it with the adapters merged into the weights (`_serving.py`, after every update;
`serve_merged: false` shares the adapted model itself), and the reference policy for the KL
penalty is the model with its adapters disabled. Where the sampler decodes the policy itself a step holds
`sampler.lock`; after it, `sampler.publish_weights` publishes the new version (no row straddles two).

torch and peft are imported when a trainer is built, not when this module is imported, so the
config class is cheap to import.

Long because `LocalTrainer` is one object holding the model, the optimizer, the LoRA state and
the sampler lock, which the step, the warm-up step, the reference switch and checkpoints all
change. The pure parts live in `grpo.py`, `_prefix.py` and `checkpoint.py`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MissingDependencyError
from ..heap import start_heap_trimmer
from ..records import Trace
from . import _prefix, _serving, checkpoint, sft
from ._blocking import UpdateStopped, in_daemon_thread
from .base import StepMetrics, TrainGroup, Trainer, TrainerNode, WeightSink
from .grpo import BatchItem, GRPOConfig, build_batch, policy_loss, staleness, step_metrics

FINETUNE_MODES = ("lora", "full")
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LocalTrainerConfig(TrainerNode):
    """The `trainer` config group for `trainer=local`."""

    kind: str = "local"
    finetune: str = "lora"
    """"lora" (adapters through peft) or "full" (every weight)."""
    lr: float = 1e-4  # the learning rate (Adam)
    weight_decay: float = 0.0  # decoupled weight decay (AdamW); 0 = none
    adam_beta1: float = 0.9  # Adam's decay of the gradient's running mean
    adam_beta2: float = 0.999  # Adam's decay of the squared gradient's running mean
    adam_eps: float = 1e-8  # Adam's epsilon, added to the denominator for stability
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this; null = no clipping (the norm is still reported)."""
    lora_rank: int = 16  # finetune=lora: the adapters' rank
    lora_alpha: float = 32.0  # finetune=lora: the adapters' scale is lora_alpha / lora_rank
    lora_dropout: float = 0.0  # finetune=lora: dropout on the adapters' input
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS  # finetune=lora: the module names adapted
    lora_layers: int | None = None
    """Adapters on the top N decoder layers only (null = every layer). The backward pass then stops
    at the lowest adapted layer: half the layers ~ a third less time a step on a CPU."""
    micro_batch_tokens: int | None = 1024
    """Padded tokens per forward/backward (long traces go alone); bounds activation memory."""
    micro_batch_size: int | None = None
    """Traces per forward/backward (combined with micro_batch_tokens when both are set)."""
    temperature: float = 1.0
    """The sampler's temperature: logprobs are recomputed under softmax(logits / temperature)."""
    device: str = "auto"
    """"auto" (cuda if available, else cpu), or a torch device string."""
    autocast_dtype: str | None = None
    """"bfloat16" / "float16" runs forward passes under autocast (logprobs still fp32)."""
    seed: int = 0
    """Seeds the LoRA initialisation."""
    share_prefix: bool = True
    """Run a token prefix shared by several traces (a GRPO group's prompt, a common system prompt)
    once per micro-batch and only the suffixes per trace; same loss and gradients, far fewer tokens."""
    share_prefix_min_tokens: int = 32
    """Shortest common run worth its own forward pass when sharing prefixes."""
    serve_merged: bool = True
    """LoRA: the in-process sampler decodes a copy of the model with the adapters merged into its
    weights (`_serving.py`: faster decoding, one more copy of the weights in memory); false: it
    decodes the adapted model itself."""
    serve_dtype: str | None = None
    """LoRA with serve_merged: the merged copy's dtype. bfloat16 halves the weight bytes a decode
    step reads (the sampler keeps attention and its KV cache in fp32); null = the model's dtype."""

    def __post_init__(self) -> None:
        if self.finetune not in FINETUNE_MODES:
            raise ConfigError(
                f"trainer.finetune={self.finetune!r} is not supported; valid choices: "
                f"{list(FINETUNE_MODES)}"
            )
        if self.lr <= 0:
            raise ConfigError(f"trainer.lr={self.lr} must be > 0")
        if self.temperature < 0:
            raise ConfigError(f"trainer.temperature={self.temperature} must be >= 0")
        if self.share_prefix_min_tokens < 1:
            raise ConfigError(f"trainer.share_prefix_min_tokens={self.share_prefix_min_tokens} must be >= 1")
        for key in ("micro_batch_tokens", "micro_batch_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"trainer.{key}={value} must be >= 1, or null for no limit")
        if self.autocast_dtype not in (None, "bfloat16", "float16"):
            raise ConfigError(
                f"trainer.autocast_dtype={self.autocast_dtype!r}; valid choices: null, bfloat16, "
                "float16"
            )
        if self.serve_dtype not in (None, "bfloat16", "float16"):
            raise ConfigError(
                f"trainer.serve_dtype={self.serve_dtype!r}; valid choices: null, bfloat16, float16"
            )
        if self.serve_dtype is not None and not (self.finetune == "lora" and self.serve_merged):
            raise ConfigError(
                f"trainer.serve_dtype={self.serve_dtype} needs the merged serving copy: set "
                "trainer.finetune=lora and trainer.serve_merged=true, or trainer.serve_dtype=null "
                "(model.dtype sets the dtype of the one shared model)"
            )
        if self.lora_layers is not None and (self.finetune != "lora" or self.lora_layers < 1):
            raise ConfigError(
                f"trainer.lora_layers={self.lora_layers} needs trainer.finetune=lora and a value >= 1 "
                "(the number of top decoder layers that get adapters), or null for every layer"
            )
        if self.finetune == "lora" and (self.lora_rank < 1 or not self.lora_target_modules):
            raise ConfigError(
                f"trainer.lora_rank={self.lora_rank} must be >= 1 and trainer.lora_target_modules "
                f"{list(self.lora_target_modules)} must not be empty"
            )


def _import_torch() -> tuple[Any, Any]:
    try:
        import peft
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"the local trainer needs torch and peft ({exc}); pip install 'agentcore-rl-harness[local]'"
        ) from exc
    return torch, peft


def _top_layers(model: Any, count: int | None) -> dict[str, Any]:
    """peft's `layers_to_transform` for the top `count` decoder layers ({} = every layer)."""
    if count is None:
        return {}
    total = getattr(model.config, "num_hidden_layers", None)
    if total is None:
        raise ConfigError(f"trainer.lora_layers={count}: the model's config has no num_hidden_layers; "
                          "set trainer.lora_layers=null")
    if count > total:
        raise ConfigError(f"trainer.lora_layers={count} is more than the model's {total} decoder layers; "
                          f"use 1..{total}, or null for every layer")
    return {"layers_to_transform": list(range(total - count, total))}


class LocalTrainer(Trainer):
    """GRPO on an in-process transformers causal LM; see the module docstring for weight sync."""

    def __init__(
        self,
        model: Any,
        *,
        sampler: WeightSink | None = None,
        config: LocalTrainerConfig | None = None,
        algo: GRPOConfig | None = None,
        concurrent_sampling: bool = False,
    ) -> None:
        """`concurrent_sampling`: the sampler may decode while an update runs (the run's
        `trainer.overlap_rollouts`); needs LoRA with a merged serving copy, which is then kept in
        two buffers, so an update never writes the weights of a row in flight."""
        torch, peft = _import_torch()
        self.config = config or LocalTrainerConfig()
        if concurrent_sampling and sampler is not None and not (
            self.config.finetune == "lora" and self.config.serve_merged
        ):
            raise ConfigError(
                "trainer.overlap_rollouts=true needs the sampler to decode a merged copy that the update "
                "does not touch (so does trainer.mode=async): set trainer.finetune=lora and "
                "trainer.serve_merged=true, or trainer.overlap_rollouts=false / trainer.mode=sync"
            )
        self.algo = algo or GRPOConfig()
        self.sampler = sampler
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu")
            if self.config.device == "auto"
            else self.config.device
        )
        model = model.to(self.device)
        self._reference = None
        self._merged = None
        if self.config.finetune == "lora":
            if self.config.serve_merged and sampler is not None:
                self._merged = _serving.MergedCopy(model, dtype=self.config.serve_dtype,
                                                   buffers=2 if concurrent_sampling else 1)
            lora = peft.LoraConfig(
                r=self.config.lora_rank,
                lora_alpha=self.config.lora_alpha,
                lora_dropout=self.config.lora_dropout,
                target_modules=list(self.config.lora_target_modules),
                **_top_layers(model, self.config.lora_layers),
            )
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.config.seed)
                self.model = peft.get_peft_model(model, lora)
            self.policy_model = self.model.get_base_model()
        else:
            self.model = self.policy_model = model
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            if self.algo.kl_coef > 0:
                self._reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.model.eval()
        parts = self._decoder_and_head(self.policy_model)
        self._share_prefix = bool(
            self.config.share_prefix and parts is not None and _prefix.supports_sharing(self.policy_model, parts[0])
        )
        self._parameters = [p for p in self.model.parameters() if p.requires_grad]
        self._names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        self.optimizer = self._new_optimizer()
        self._sft_optimizer: Any = None  # the warm-up's own (see sft_step)
        self.step_count = 0
        self.sft_steps = 0
        self.policy_version = 0
        self._busy = threading.Lock()
        self._stopping = threading.Event()  # closed: an update in flight stops (UpdateStopped)
        start_heap_trimmer()  # step-sized logits and activations otherwise fragment the heap
        self._publish()

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self._parameters)

    async def step(self, *, groups: Sequence[TrainGroup]) -> StepMetrics:
        """One GRPO update on `groups` (off the event loop: `_blocking.py`), then the weight sync."""
        return await in_daemon_thread(self.step_sync, groups)

    def step_sync(self, groups: Sequence[TrainGroup]) -> StepMetrics:
        """The blocking body of `step`, for sync callers (benchmarks)."""
        started = time.perf_counter()
        with self._busy:
            items, stats = build_batch(
                groups, normalize_std=self.algo.normalize_std, eps=self.algo.std_eps
            )
            lags = staleness(items, self.policy_version)
            self.step_count += 1
            result: dict[str, Any] = {}  # nothing trained: no loss-side numbers
            if items:
                # the sampler's lock keeps it off weights the update writes: the policy itself when
                # it is what the sampler decodes (a merged copy is written only by `_publish`)
                with self._sampler_lock(needed=self._merged is None):
                    result = self._update(items, stats.trained_tokens)
                    self.policy_version += 1
                result["sync_s"] = self._publish()
            return step_metrics(
                step=self.step_count, policy_version=self.policy_version, stats=stats, lags=lags,
                started=started, lr=float(self.optimizer.param_groups[0]["lr"]), **result,
            )

    def _update(self, items: list[BatchItem], total_tokens: int) -> dict[str, Any]:
        torch, _ = _import_torch()
        algo = self.algo
        need_reference = algo.kl_coef > 0
        loss_total = 0.0
        clipped = 0
        kl_sum = 0.0
        sampler_kl_sum = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        self.model.train()
        try:
            for micro in self._micro_batches(items):
                tensors = self._tensors(micro)
                reference = None
                if need_reference:
                    with torch.no_grad(), self._reference_policy() as reference_model:
                        reference = self._logprobs(reference_model, tensors)
                with self._autocast():
                    logprobs = self._logprobs(self.policy_model, tensors)
                out = policy_loss(
                    logprobs,
                    tensors["old_logprobs"],
                    tensors["advantages"],
                    tensors["mask"],
                    clip_low=algo.clip_low,
                    clip_high=algo.clip_high,
                    tis_cap=algo.tis_cap,
                    kl_coef=algo.kl_coef,
                    ref_logprobs=reference,
                    aggregation=algo.aggregation,
                    total_tokens=total_tokens,
                    total_sequences=len(items),
                )
                out.loss.backward()
                loss_total += float(out.loss.detach())
                clipped += out.clipped_tokens
                sampler_kl_sum += out.sampler_kl_sum
                kl_sum += out.kl_sum or 0.0
            limit = self.config.max_grad_norm
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self._parameters, limit if limit is not None else float("inf")
            )
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        finally:
            self.model.eval()
        return dict(loss=loss_total, kl=kl_sum / total_tokens if need_reference else None,
                    sampler_kl=sampler_kl_sum / total_tokens, clip_fraction=clipped / total_tokens,
                    grad_norm=float(grad_norm))

    def _new_optimizer(self) -> Any:
        torch, _ = _import_torch()
        return torch.optim.AdamW(
            self._parameters,
            lr=self.config.lr,
            betas=(self.config.adam_beta1, self.config.adam_beta2),
            eps=self.config.adam_eps,
            weight_decay=self.config.weight_decay,
        )

    def sft_step(self, traces: Sequence[Trace], *, lr: float | None = None) -> sft.SFTMetrics:
        """One supervised step (`trainers/sft.py`): mean token NLL of the traces' masked tokens,
        at `lr` (default trainer.lr), then the weight sync like a GRPO step.

        The warm-up has its own AdamW: its moments never reach RL's optimizer, so the first GRPO
        steps do not keep moving along the demonstrations' gradients (a lift measured after the
        warm-up is RL's own), as when SFT and RL are separate jobs."""
        torch, _ = _import_torch()
        started = time.perf_counter()
        items = sft.plain_items(sft.trained_traces(traces))
        total = sum(sum(item.loss_mask) for item in items)
        if not total:
            raise ValueError("no trained tokens in the demonstrations: nothing to warm up on")
        with self._busy:  # the same locks and weight sync as a GRPO step
            if self._sft_optimizer is None:
                self._sft_optimizer = self._new_optimizer()
            optimizer = self._sft_optimizer
            lr = self.config.lr if lr is None else lr
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_total = 0.0
            optimizer.zero_grad(set_to_none=True)
            self.model.train()
            try:
                with self._sampler_lock():
                    for micro in self._micro_batches(items):
                        tensors = self._tensors(micro)
                        with self._autocast():
                            logprobs = self._logprobs(self.policy_model, tensors)
                        loss = -(logprobs * tensors["mask"]).sum() / total
                        loss.backward()
                        loss_total += float(loss.detach())
                    limit = self.config.max_grad_norm
                    grad_norm = torch.nn.utils.clip_grad_norm_(
                        self._parameters, limit if limit is not None else float("inf"))
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    self.policy_version += 1
            finally:
                self.model.eval()
            self.sft_steps += 1
        self._publish()
        return sft.SFTMetrics(
            step=self.sft_steps, policy_version=self.policy_version, loss=loss_total, trained_tokens=total,
            sequences=len(items), grad_norm=float(grad_norm), lr=float(lr),
            wall_time_s=round(time.perf_counter() - started, 3))

    def sft_loss(self, traces: Sequence[Trace]) -> float:
        """The warm-up's loss on `traces` under the current policy, without an update."""
        return sft.mean_nll(self.compute_logprobs(sft.trained_traces(traces)))[0]

    def compute_logprobs(self, traces: Sequence[Trace]) -> list[tuple[float | None, ...]]:
        """Logprobs of each trace's trained tokens under the current policy (None elsewhere)."""
        torch, _ = _import_torch()
        items = sft.plain_items(traces)
        results: list[tuple[float | None, ...]] = [(None,) * len(item.loss_mask) for item in items]
        with self._busy, self._sampler_lock(), torch.no_grad():
            for micro in self._micro_batches([item for item in items if any(item.loss_mask)]):
                tensors = self._tensors(micro)
                with self._autocast():
                    rows = self._logprobs(self.policy_model, tensors).tolist()
                for item, values in zip(micro, rows):
                    results[int(item.rollout_key)] = tuple(v if m else None for v, m in zip(values, item.loss_mask))
        return results

    def _micro_batches(self, items: list[BatchItem]) -> Iterator[list[BatchItem]]:
        """A micro-batch grows while its padded size fits the budgets.

        Unshared: longest first, size = traces x longest. Shared: in token order, so traces with a
        common prefix are neighbours, and a shared prefix counts once (`_prefix.tree_tokens`).
        """
        if self._share_prefix:
            ordered = sorted(items, key=lambda item: item.token_ids)
        else:
            ordered = sorted(items, key=lambda item: len(item.token_ids), reverse=True)
        budget = self.config.micro_batch_tokens
        size = self.config.micro_batch_size
        batch: list[BatchItem] = []
        for item in ordered:
            if self._stopping.is_set():  # between micro-batches, before the optimizer step
                raise UpdateStopped("the trainer was closed during an update; the update was abandoned")
            if self._share_prefix:
                padded = _prefix.tree_tokens(self._prefix_tree(batch + [item]), [len(i.token_ids) for i in batch + [item]])
            else:
                padded = (len(batch) + 1) * (len(batch[0].token_ids) if batch else len(item.token_ids))
            fits_tokens = budget is None or padded <= budget
            fits_size = size is None or len(batch) < size
            if batch and not (fits_tokens and fits_size):
                yield batch
                batch = []
            batch.append(item)
        if batch:
            yield batch

    def _tensors(self, items: list[BatchItem]) -> dict[str, Any]:
        torch, _ = _import_torch()
        width = max(len(item.token_ids) for item in items)
        completion = max(len(item.loss_mask) for item in items)
        input_ids = torch.zeros((len(items), width), dtype=torch.long, device="cpu")  # filled here, moved once
        attention_mask = torch.zeros_like(input_ids)
        mask = torch.zeros((len(items), completion), dtype=torch.float32, device="cpu")
        old = torch.zeros_like(mask)
        rows, columns, positions, targets = [], [], [], []
        for row, item in enumerate(items):
            if item.prompt_length < 1:
                raise ValueError(
                    f"trace {item.rollout_key!r} has prompt_length {item.prompt_length}; a trained "
                    "token needs at least one token of context before it"
                )
            input_ids[row, : len(item.token_ids)] = torch.tensor(item.token_ids, device="cpu")
            attention_mask[row, : len(item.token_ids)] = 1
            mask[row, : len(item.loss_mask)] = torch.tensor(item.loss_mask, dtype=torch.float32, device="cpu")
            old[row, : len(item.old_logprobs)] = torch.tensor(item.old_logprobs, dtype=torch.float32, device="cpu")
            for column, trained in enumerate(item.loss_mask):
                if trained:
                    rows.append(row)
                    columns.append(column)
                    # the logits at position p predict token p + 1
                    positions.append(item.prompt_length + column - 1)
                    targets.append(item.token_ids[item.prompt_length + column])
        device = self.device
        as_long = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
        shared = {}
        if self._share_prefix:
            shared = {
                "prefix_tree": self._prefix_tree(items),
                "sequences": [item.token_ids for item in items],
                "trained_positions": [
                    [item.prompt_length + column - 1 for column, trained in enumerate(item.loss_mask) if trained]
                    for item in items
                ],
            }
        return {
            **shared,
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            "mask": mask.to(device),
            "old_logprobs": old.to(device),
            "advantages": torch.tensor([item.advantage for item in items], dtype=torch.float32, device=device),
            "rows": as_long(rows),
            "columns": as_long(columns),
            "positions": as_long(positions),
            "targets": as_long(targets),
        }

    def _logprobs(self, model: Any, tensors: dict[str, Any]) -> Any:
        """[batch, completion] logprobs of the trained tokens (0 elsewhere), at the temperature.

        Only the hidden states of trained positions go through the LM head, so long prompts and
        tool outputs cost no vocabulary-sized logits.
        """
        torch, _ = _import_torch()
        rows, positions = tensors["rows"], tensors["positions"]
        parts = self._decoder_and_head(model)
        if parts is not None:
            decoder, head = parts
            if "prefix_tree" in tensors:
                trained = _prefix.trained_hidden_states(
                    decoder,
                    tensors["prefix_tree"],
                    tensors["sequences"],
                    tensors["trained_positions"],
                    device=self.device,
                )
            else:
                trained = decoder(
                    input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"]
                ).last_hidden_state[rows, positions]
            with torch.autocast(self.device.type, enabled=False):
                logits = head(trained.float())
        else:
            logits = model(
                input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"]
            ).logits[rows, positions]
        temperature = self.config.temperature or 1.0
        token_logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
        selected = token_logprobs.gather(-1, tensors["targets"].unsqueeze(-1)).squeeze(-1)
        out = torch.zeros(tensors["mask"].shape, dtype=torch.float32, device=self.device)
        return out.index_put((rows, tensors["columns"]), selected)

    def _prefix_tree(self, items: list[BatchItem]) -> _prefix.PrefixNode:
        return _prefix.build_tree(
            [item.token_ids for item in items],
            [_prefix.shareable_length(item.token_ids, item.prompt_length, item.loss_mask) for item in items],
            min_tokens=self.config.share_prefix_min_tokens,
        )

    @staticmethod
    def _decoder_and_head(model: Any) -> tuple[Any, Any] | None:
        """The decoder and LM head when logits can be taken from chosen hidden states only."""
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        softcap = getattr(model.config, "final_logit_softcapping", None)
        if decoder is None or head is None or decoder is model or softcap:
            return None
        return decoder, head

    @contextlib.contextmanager
    def _reference_policy(self) -> Iterator[Any]:
        if self._reference is not None:
            yield self._reference
        else:
            with self.model.disable_adapter():
                yield self.policy_model

    def _autocast(self) -> Any:
        torch, _ = _import_torch()
        if self.config.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, self.config.autocast_dtype))

    def _publish(self) -> float | None:
        """Hand the sampler the current policy: the adapted model, or its merged copy; the seconds it took."""
        if self.sampler is None:
            return None
        started, served = time.perf_counter(), self.policy_model
        if self._merged is not None:
            if not self._merged.in_place:  # two buffers: the one the sampler left (it swaps after its rows,
                self.sampler.settle()  # without the update waiting); one: written in place between rollouts
            with self._sampler_lock(needed=self._merged.in_place):
                served = self._merged.refresh(self.model)
        self.sampler.publish_weights(served, policy_version=self.policy_version)
        return time.perf_counter() - started

    def _sampler_lock(self, *, needed: bool = True) -> Any:
        """The sampler's lock, where this trainer writes weights the sampler may be decoding."""
        return self.sampler.lock if self.sampler is not None and needed else contextlib.nullcontext()

    def close(self) -> None:
        """An update in flight stops at its next micro-batch, its weights unchanged (a stopped run)."""
        self._stopping.set()

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Weights (adapter or full), optimizer state, step, policy version and RNG states."""
        parameters = dict(self.model.named_parameters())
        write_adapter = None
        if self.config.finetune == "lora":
            write_adapter = lambda folder: self.model.save_pretrained(str(folder / "adapter"))  # noqa: E731
        with self._busy:
            checkpoint.save(
                path,
                step=self.step_count,
                policy_version=self.policy_version,
                finetune=self.config.finetune,
                weights={name: parameters[name] for name in self._names},
                optimizer_state=self.optimizer.state_dict(),
                write_extra=write_adapter,
            )

    def load_checkpoint(self, path: str | os.PathLike[str]) -> int:
        """Restore a `save_checkpoint` directory into this trainer; returns its step."""
        torch, _ = _import_torch()
        saved = checkpoint.load(path)
        if saved.finetune != self.config.finetune or set(saved.weights) != set(self._names):
            missing = sorted(set(self._names) - set(saved.weights))[:3]
            raise checkpoint.CheckpointError(
                f"checkpoint {Path(path)} ({saved.finetune}, {len(saved.weights)} tensors) does "
                f"not fit this trainer ({self.config.finetune}, {len(self._names)} trainable "
                f"tensors; e.g. missing {missing}); use the same trainer.finetune and LoRA settings"
            )
        parameters = dict(self.model.named_parameters())
        with self._busy, self._sampler_lock(), torch.no_grad():
            for name in self._names:
                parameters[name].copy_(saved.weights[name].to(self.device))
            self.optimizer.load_state_dict(saved.optimizer_state)
            checkpoint.restore_rng_state(saved.rng_state)
            self.step_count = saved.step
            self.policy_version = saved.policy_version
        self._publish()
        return saved.step


def build_trainer(model: Any, *, sampler: Any, section: Any) -> LocalTrainer:
    """The registry's factory for `trainer=local` (see `trainers/registry.py`)."""
    return LocalTrainer(model, sampler=sampler, config=section.trainer, algo=section.algo,
                        concurrent_sampling=section.loop.overlap_rollouts or section.loop.mode == "async")
