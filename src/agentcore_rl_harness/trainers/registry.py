"""Which trainer implements each `trainer=<kind>` config group, imported only when selected.

An entry names the config class (the typed `trainer` node) and how the harness builds it:

- ``in_process``: the trainer updates the harness's own in-process model, and the gateway samples
  from the in-process `HFLocalSampler` (`trainer=local`). Built by
  ``factory(model, sampler=..., section=...)``.
- ``service``: the trainer owns the weights elsewhere (a Tinker-compatible service, SageMaker
  Training Sessions) and hands the gateway a sampling backend over its current weights; the
  harness loads only the tokenizer. Built by ``factory(section=..., model_dir=..., tokenizer=...,
  config=...)`` and returns an object with ``.sampler`` (a `SamplingBackend`) besides the
  `Trainer` protocol, plus ``close()``.
- ``external``: another framework drives the loop (verl, slime) and calls into the harness; the
  config group exists so the same task suite and config are used, and `train` / `run` modes say
  which command to run instead.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

@dataclass(frozen=True)
class TrainerSpec:
    kind: str
    config_class: str
    """"module:attr" of the frozen dataclass for the `trainer` node."""
    factory: str
    """"module:attr" of the builder; for `external` trainers, the text telling what to run."""
    sft: bool = False
    """Its trainer has the supervised warm-up step (`trainers/sft.py`: `sft_step`, `sft_loss`)."""

    def load_config_class(self) -> type:
        return _load(self.config_class)

    def load_factory(self) -> Any:
        return _load(self.factory)


_PKG = "agentcore_rl_harness.trainers"

TRAINERS: dict[str, TrainerSpec] = {
    "local": TrainerSpec("in_process", f"{_PKG}.local:LocalTrainerConfig", f"{_PKG}.local:build_trainer",
                         sft=True),
    "tinker": TrainerSpec("service", f"{_PKG}.tinker:TinkerTrainerConfig", f"{_PKG}.tinker:build_trainer"),
    "skyrl": TrainerSpec("service", f"{_PKG}.skyrl:SkyRLTrainerConfig", f"{_PKG}.skyrl:build_trainer"),
    "sagemaker": TrainerSpec("service", f"{_PKG}.sagemaker:SageMakerTrainerConfig", f"{_PKG}.sagemaker:build_trainer"),
    "verl": TrainerSpec("external", "agentcore_rl_harness.integrations.verl:VerlTrainerConfig", "agentcore_rl_harness.integrations.verl:EXTERNAL_COMMAND"),
    "slime": TrainerSpec("external", "agentcore_rl_harness.integrations.slime:SlimeTrainerConfig", "agentcore_rl_harness.integrations.slime:EXTERNAL_COMMAND"),
}
"""kind -> spec. Adapters add themselves here (one line each)."""


def sft_trainers() -> tuple[str, ...]:
    """The kinds whose trainer has the supervised warm-up step."""
    return tuple(kind for kind, spec in TRAINERS.items() if spec.sft)


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def spec_for(kind: str) -> TrainerSpec:
    from ..errors import ConfigError

    if kind not in TRAINERS:
        raise ConfigError(f"trainer={kind!r} is not available; valid choices: {sorted(TRAINERS)}")
    return TRAINERS[kind]
