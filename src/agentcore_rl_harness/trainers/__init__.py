"""Trainers: the `Trainer` seam, GRPO as pure functions, and the embedded local trainer.

`LocalTrainer` needs torch and peft; they load when a trainer is built, not on import.
"""

from .base import StepMetrics, Trainer, TrainGroup, TrainSample
from .grpo import GRPOConfig, build_batch, group_advantages, groups_from_rollouts, policy_loss
from .local import LocalTrainer, LocalTrainerConfig

__all__ = [
    "GRPOConfig",
    "LocalTrainer",
    "LocalTrainerConfig",
    "StepMetrics",
    "TrainGroup",
    "TrainSample",
    "Trainer",
    "build_batch",
    "group_advantages",
    "groups_from_rollouts",
    "policy_loss",
]
