"""The torch side: one base model, LoRA training models on copies of it, and samplers.

Every method takes `lock`, so training and sampling never overlap (the futures worker runs
jobs one at a time as well). A sampler made from saved weights samples from exactly those
tensors: they are copied into the host LoRA model for the call and the host's own weights put
back afterwards. A base-model sampler samples from the untouched base model.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import threading
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..heap import start_heap_trimmer
from .checkpoints import CheckpointPath, CheckpointStore, LoraSpec, check_name
from .errors import BadRequest, NotFound
from .generate import SampleSpec, sample
from .losses import loss_function
from .wire import ForwardBackwardCall, ForwardBackwardResult, SampleOutput

log = logging.getLogger("agentcore_rl_harness.tinker_server")

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
UNEMBED_MODULES = ("lm_head",)
LORA_ALPHA = 32.0


@dataclass
class TrainingModel:
    model_id: str
    session_id: str
    lora: LoraSpec
    model: Any
    names: list[str]
    optimizer: Any
    step: int = 0

    def trainable(self) -> dict[str, Any]:
        parameters = dict(self.model.named_parameters())
        return {name: parameters[name] for name in self.names}


@dataclass
class Sampler:
    sampler_id: str
    session_id: str
    model_path: str | None = None
    host_id: str | None = None
    """The training (or hidden) model whose LoRA structure the weights fit; None: the base model."""
    weights: dict[str, Any] | None = field(default=None, repr=False)


class Engine:
    """Owns the models. `model_name` is what clients may call the base model besides its folder."""

    def __init__(self, *, model_name: str, model_path: Path, checkpoint_root: Path, max_models: int = 4) -> None:
        from ..models import load_model, load_tokenizer

        started = time.monotonic()
        self.model_path = Path(model_path)
        self.base_model_name = str(self.model_path)
        self.aliases = {model_name, self.base_model_name}
        self.base = load_model(self.model_path).requires_grad_(False)
        self.tokenizer = load_tokenizer(self.model_path)
        self.checkpoints = CheckpointStore(checkpoint_root)
        self.max_models = max_models
        self.lock = threading.RLock()
        self.models: dict[str, TrainingModel] = {}
        self._hidden: dict[LoraSpec, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self._sampler_counter = itertools.count()
        self.context_length = int(getattr(self.base.config, "max_position_embeddings", 0) or 0)
        start_heap_trimmer()  # a long-lived server of varying-size tensors (heap.py)
        parameters = sum(p.numel() for p in self.base.parameters())
        log.info("model %s loaded from %s (%.1fM parameters) in %.1f s", model_name, self.model_path,
                 parameters / 1e6, time.monotonic() - started)

    # -- names and lookups ----------------------------------------------------------------------

    def check_base_model(self, name: str | None) -> str:
        if name is not None and name not in self.aliases:
            raise BadRequest(f"this server serves base model {sorted(self.aliases)}, not {name!r}; "
                             "pass one of those names as base_model")
        return self.base_model_name

    def model(self, model_id: str) -> TrainingModel:
        found = self.models.get(model_id)
        if found is None:
            raise NotFound(f"unknown model_id {model_id!r}; create it with create_lora_training_client first")
        return found

    def sampler(self, sampler_id: str) -> Sampler:
        found = self.samplers.get(sampler_id)
        if found is None:
            raise NotFound(f"unknown sampling session {sampler_id!r}; create it with create_sampling_client")
        return found

    def info(self, model_id: str) -> dict[str, Any]:
        with self.lock:
            model = self.model(model_id)
        return {
            "type": "get_info", "model_id": model_id, "is_lora": True, "lora_rank": model.lora.rank,
            "model_name": self.base_model_name, "optimizer_config": {"type": "adamw"},
            "model_data": {"arch": self.base.config.model_type, "model_name": self.base_model_name,
                           "tokenizer_id": self.base_model_name},
        }

    # -- training models ------------------------------------------------------------------------

    def _build(self, model_id: str, session_id: str, lora: LoraSpec) -> TrainingModel:
        import peft

        if lora.rank < 1:
            raise BadRequest(f"LoRA rank must be >= 1, got {lora.rank}")
        wanted = (ATTENTION_MODULES if lora.train_attn else ()) + (MLP_MODULES if lora.train_mlp else ()) \
            + (UNEMBED_MODULES if lora.train_unembed else ())
        present = {name.rsplit(".", 1)[-1] for name, module in self.base.named_modules()
                   if isinstance(module, torch.nn.Linear)}
        targets = sorted(set(wanted) & present)
        if not targets:
            raise BadRequest(f"no LoRA target among {list(wanted)} exists in this model ({sorted(present)})")
        model = copy.deepcopy(self.base)
        config = peft.LoraConfig(r=lora.rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # A LoRA on a tied lm_head is a separate delta; the embedding stays as it is.
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            torch.manual_seed(lora.seed if lora.seed is not None else uuid.uuid4().int % 2**63)
            model = peft.get_peft_model(model, config)
        model.eval()
        names = [name for name, p in model.named_parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        return TrainingModel(model_id, session_id, lora, model, names, optimizer)

    def create_model(self, *, session_id: str, model_seq_id: int, lora: LoraSpec) -> str:
        model_id = f"{session_id}:train:{model_seq_id}"
        with self.lock:
            if model_id in self.models:
                raise BadRequest(f"model {model_id} already exists; create it with a new model_seq_id "
                                 "(a new ServiceClient does this)")
            if len(self.models) >= self.max_models:
                raise BadRequest(
                    f"this server holds at most {self.max_models} training models and has "
                    f"{len(self.models)}; close finished ServiceClients (their models are freed) or "
                    "restart the server with a larger --max-models"
                )
            self.models[model_id] = self._build(model_id, session_id, lora)
        log.info("created LoRA model %s (rank %d)", model_id, lora.rank)
        return model_id

    def release_session(self, session_id: str) -> None:
        with self.lock:
            for model_id in [m for m, model in self.models.items() if model.session_id == session_id]:
                del self.models[model_id]
            for sampler_id in [s for s, sampler in self.samplers.items() if sampler.session_id == session_id]:
                del self.samplers[sampler_id]

    def forward_backward(self, call: ForwardBackwardCall) -> ForwardBackwardResult:
        started = time.monotonic()
        fn = loss_function(call.loss_fn)
        with self.lock:
            model = self.model(call.model_id)
            outputs, total, tokens = [], 0.0, 0
            vocab = model.model.get_output_embeddings().weight.shape[0]
            for index, datum in enumerate(call.data):
                targets = self._targets(index, datum, vocab)
                with torch.set_grad_enabled(not call.forward_only):
                    logits = model.model(input_ids=torch.tensor([datum.input_tokens])).logits[0].float()
                    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
                    loss, extra = fn(logprobs, datum.loss_fn_inputs, call.loss_fn_config, torch)
                    if not call.forward_only:
                        loss.backward()
                total += float(loss.detach())
                tokens += len(targets)
                outputs.append({"logprobs": logprobs.detach().numpy(),
                                **{key: value.numpy() for key, value in extra.items()}})
        log.info("%s %s: %d datums, %d tokens, loss %.4f (%.2f s)",
                 "forward" if call.forward_only else "forward_backward", call.model_id, len(call.data),
                 tokens, total, time.monotonic() - started)
        return ForwardBackwardResult(tuple(outputs), {"loss:sum": total})

    @staticmethod
    def _targets(index: int, datum: Any, vocab: int) -> Any:
        targets = datum.loss_fn_inputs.get("target_tokens")
        length = len(datum.input_tokens)
        if length == 0:
            raise BadRequest(f"datum {index} has an empty model_input")
        if targets is None or targets.shape != (length,):
            shape = None if targets is None else list(targets.shape)
            raise BadRequest(f"datum {index}: target_tokens must have shape [{length}] (one per input token), got {shape}")
        if targets.min() < 0 or targets.max() >= vocab:
            raise BadRequest(f"datum {index}: target_tokens must be in [0, {vocab}), got {targets.min()}..{targets.max()}")
        return torch.from_numpy(np.asarray(targets, dtype=np.int64))

    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]:
        started = time.monotonic()
        with self.lock:
            model = self.model(model_id)
            for group in model.optimizer.param_groups:
                group.update(lr=adam["learning_rate"], betas=(adam["beta1"], adam["beta2"]), eps=adam["eps"],
                             weight_decay=adam["weight_decay"])
            parameters = list(model.trainable().values())
            limit = adam["grad_clip_norm"] if adam["grad_clip_norm"] > 0 else math.inf
            grads = [p for p in parameters if p.grad is not None]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(grads, limit)) if grads else 0.0
            model.optimizer.step()
            model.optimizer.zero_grad(set_to_none=True)
            model.step += 1
        log.info("optim_step %s: step %d, lr %g, grad norm %.4f (%.2f s)", model_id, model.step,
                 adam["learning_rate"], grad_norm, time.monotonic() - started)
        return {"grad_norm": grad_norm, "learning_rate": adam["learning_rate"], "step": float(model.step)}

    # -- checkpoints ----------------------------------------------------------------------------

    def save(self, model_id: str, *, kind: str, name: str, overwrite: bool = True) -> str:
        with self.lock:
            model = self.model(model_id)
            path = CheckpointPath(model_id, kind, check_name(name))
            self.checkpoints.save(
                path, base_model=self.base_model_name, lora=model.lora, step=model.step,
                weights=model.trainable(),
                optimizer_state=model.optimizer.state_dict() if kind == "weights" else None,
                overwrite=overwrite,
            )
        log.info("saved %s", path.uri)
        return path.uri

    def load(self, model_id: str, uri: str, *, optimizer: bool) -> None:
        path = CheckpointPath.parse(uri)
        with self.lock:
            model = self.model(model_id)
            if self.checkpoints.lora(path) != model.lora:
                raise BadRequest(f"checkpoint {uri} has LoRA config {asdict(self.checkpoints.lora(path))}, "
                                 f"model {model_id} has {asdict(model.lora)}")
            weights = self.checkpoints.weights(path)
            state = self.checkpoints.optimizer_state(path) if optimizer else None
            self._copy_in(model, weights)
            if state is not None:
                model.optimizer.load_state_dict(state)
            model.step = int(self.checkpoints.meta(path)["step"])
        log.info("loaded %s into %s%s", uri, model_id, " with optimizer state" if optimizer else "")

    def create_from_state(self, *, session_id: str, model_seq_id: int, uri: str, optimizer: bool) -> str:
        lora = self.checkpoints.lora(CheckpointPath.parse(uri))
        with self.lock:
            model_id = self.create_model(session_id=session_id, model_seq_id=model_seq_id, lora=lora)
            try:
                self.load(model_id, uri, optimizer=optimizer)
            except Exception:
                del self.models[model_id]
                raise
        return model_id

    @staticmethod
    def _copy_in(model: TrainingModel, weights: dict[str, Any]) -> None:
        parameters = model.trainable()
        if set(weights) != set(parameters):
            raise BadRequest(f"saved weights ({len(weights)} tensors) do not fit model {model.model_id} "
                             f"({len(parameters)} trainable tensors)")
        with torch.no_grad():
            for name, tensor in weights.items():
                parameters[name].copy_(tensor)

    # -- sampling -------------------------------------------------------------------------------

    def _new_sampler_id(self, session_id: str) -> str:
        return f"{session_id}:sample:{next(self._sampler_counter)}"

    def snapshot_sampler(self, model_id: str, session_id: str) -> str:
        """A sampler fixed to `model_id`'s weights as they are now."""
        with self.lock:
            model = self.model(model_id)
            sampler = Sampler(self._new_sampler_id(session_id), session_id, host_id=model_id,
                              weights={name: p.detach().clone() for name, p in model.trainable().items()})
            self.samplers[sampler.sampler_id] = sampler
        return sampler.sampler_id

    def create_sampler(self, *, session_id: str, model_path: str | None, base_model: str | None) -> str:
        with self.lock:
            if model_path is None:
                self.check_base_model(base_model)
                sampler = Sampler(self._new_sampler_id(session_id), session_id)
            else:
                path = CheckpointPath.parse(model_path)
                lora = self.checkpoints.lora(path)
                weights = self.checkpoints.weights(path)
                live = self.models.get(path.model_id)
                host = live if live is not None and live.lora == lora else self._hidden_host(lora)
                sampler = Sampler(self._new_sampler_id(session_id), session_id, model_path=model_path,
                                  host_id=host.model_id, weights=weights)
            self.samplers[sampler.sampler_id] = sampler
        return sampler.sampler_id

    def drop_sampler(self, sampler_id: str) -> None:
        with self.lock:
            self.samplers.pop(sampler_id, None)

    def _hidden_host(self, lora: LoraSpec) -> TrainingModel:
        if lora not in self._hidden:
            self._hidden[lora] = self._build(f"hidden:{len(self._hidden)}", "", lora)
        return self._hidden[lora]

    def sampler_info(self, sampler_id: str) -> dict[str, Any]:
        with self.lock:
            sampler = self.sampler(sampler_id)
        return {"sampler_id": sampler_id, "base_model": self.base_model_name, "model_path": sampler.model_path}

    def sample(self, sampler_id: str, spec: SampleSpec) -> SampleOutput:
        started = time.monotonic()
        with self.lock:
            sampler = self.sampler(sampler_id)
            if sampler.weights is None:
                output = sample(self.base, spec, decode=self.tokenizer.decode)
            else:
                host = self.models.get(sampler.host_id) or next(
                    (hidden for hidden in self._hidden.values() if hidden.model_id == sampler.host_id), None)
                if host is None:
                    raise NotFound(f"the model behind sampler {sampler_id} was released")
                own = {name: p.detach().clone() for name, p in host.trainable().items()}
                self._copy_in(host, sampler.weights)
                try:
                    output = sample(host.model, spec, decode=self.tokenizer.decode)
                finally:
                    self._copy_in(host, own)
        log.info("sample %s: %d x %d prompt tokens -> %d tokens (%.2f s)", sampler_id, spec.num_samples,
                 len(spec.prompt), sum(len(s.tokens) for s in output.sequences), time.monotonic() - started)
        return output
