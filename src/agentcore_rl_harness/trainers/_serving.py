"""The sampler's copy of a LoRA policy, with the adapters merged into its weights.

Decoding through peft's LoRA layers runs a Python wrapper and two extra small matmuls per adapted
Linear. At the batch sizes rollouts run on a CPU that is a large share of the work: SmolLM2-135M
sampling 16 rows of 900-token prompts and 48 new tokens gave 1.28x the tokens/s merged
(`bench/serving.py`, 2 cores). With `trainer.serve_merged` the trainer keeps a plain copy of the
base model and, after each update, writes `W + scale * B @ A` into it; the in-process sampler
decodes that copy. The cost is one more copy of the model's weights in memory.
"""

from __future__ import annotations

import copy
from typing import Any


class MergedCopy:
    """A plain copy of a model (taken before peft injects its adapters) that `refresh` keeps equal
    to the adapted model, with every adapter merged."""

    def __init__(self, base_model: Any) -> None:
        self.model = copy.deepcopy(base_model).eval().requires_grad_(False)
        self._targets: list[tuple[Any, Any]] | None = None

    def refresh(self, peft_model: Any) -> Any:
        """Write each adapted Linear's merged weight into the copy; returns the copy."""
        import torch
        from peft.tuners.lora import LoraLayer

        if self._targets is None:
            served = dict(self.model.named_modules())
            self._targets = [
                (module, served[name])
                for name, module in peft_model.get_base_model().named_modules()
                if isinstance(module, LoraLayer)
            ]
            if not self._targets:
                raise ValueError("trainer.serve_merged=true: the policy has no LoRA layers to merge; check "
                                 "trainer.lora_target_modules, or set trainer.serve_merged=false")
        with torch.no_grad():
            for layer, target in self._targets:
                target.weight.copy_(layer.get_base_layer().weight)
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A:
                        target.weight.add_(layer.get_delta_weight(adapter).to(target.weight.dtype))
        return self.model
