"""The sampler's copy of a LoRA policy, with the adapters merged into its weights.

Decoding through peft's LoRA layers runs a Python wrapper and two extra small matmuls per adapted
Linear. At the batch sizes rollouts run on a CPU that is a large share of the work: SmolLM2-135M
sampling 16 rows of 900-token prompts and 48 new tokens gave 1.28x the tokens/s merged
(`bench/serving.py`, 2 cores). With `trainer.serve_merged` the trainer keeps a plain copy of the
base model and, after each update, writes `W + scale * B @ A` into it; the in-process sampler
decodes that copy. The cost is one more copy of the model's weights in memory (two with
`trainer.overlap_rollouts`, see `MergedCopy`). `trainer.serve_dtype:
bfloat16` keeps that copy in bfloat16 (the merge is summed in the policy's precision, then cast),
and the sampler serves a bfloat16 model with fp32 attention over an fp32 KV cache
(`samplers/_fp32_attention.py`).
"""

from __future__ import annotations

import copy
from typing import Any


class MergedCopy:
    """Plain copies of a model (taken before peft injects its adapters) that `refresh` keeps equal
    to the adapted model, with every adapter merged.

    With one copy (`buffers=1`) a refresh writes the weights the sampler decodes, so it must run
    while no row is in flight (the trainer holds the sampler's lock, between rollouts). With two,
    a refresh writes the copy the sampler is not decoding and the sampler swaps to it once the
    rows in flight finish (`publish_weights`): rollouts may run during an update
    (`trainer.overlap_rollouts`), each row still sampled by one policy version."""

    def __init__(self, base_model: Any, dtype: str | None = None, *, buffers: int = 1) -> None:
        if buffers not in (1, 2):
            raise ValueError(f"buffers={buffers}: a merged copy has 1 or 2 buffers")
        model = copy.deepcopy(base_model).eval().requires_grad_(False)
        if dtype is not None:  # e.g. bfloat16: the sampler then runs attention in fp32
            import torch

            model = model.to(getattr(torch, dtype))
        self._models = [model] + [copy.deepcopy(model) for _ in range(buffers - 1)]
        self._targets: list[list[tuple[Any, Any]]] = []
        self._next = 0  # the buffer the next refresh writes

    @property
    def in_place(self) -> bool:
        """True when a refresh writes the very weights the sampler decodes (one buffer)."""
        return len(self._models) == 1

    def refresh(self, peft_model: Any) -> Any:
        """Write each adapted Linear's merged weight into the next copy; returns that copy."""
        import torch

        if not self._targets:
            self._targets = [self._pairs(peft_model, model) for model in self._models]
        model, targets = self._models[self._next], self._targets[self._next]
        self._next = (self._next + 1) % len(self._models)
        with torch.no_grad():
            for layer, target in targets:
                merged = layer.get_base_layer().weight.clone()  # never add into the policy's own weight
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A:
                        merged.add_(layer.get_delta_weight(adapter).to(merged.dtype))
                target.weight.copy_(merged)  # summed in the policy's precision, then cast once
        return model

    @staticmethod
    def _pairs(peft_model: Any, model: Any) -> list[tuple[Any, Any]]:
        from peft.tuners.lora import LoraLayer

        served = dict(model.named_modules())
        pairs = [(module, served[name]) for name, module in peft_model.get_base_model().named_modules()
                 if isinstance(module, LoraLayer)]
        if not pairs:
            raise ValueError("trainer.serve_merged=true: the policy has no LoRA layers to merge; check "
                             "trainer.lora_target_modules, or set trainer.serve_merged=false")
        return pairs
