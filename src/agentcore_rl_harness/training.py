"""Deprecated: the training loop lives in `agentcore_rl_harness.run.training` now. This path
works for one more release."""

import warnings

from .run.training import EXCLUDED, RowSchedule, TrainingLoop, TrainPlan, build_groups, training_reward

warnings.warn("agentcore_rl_harness.training moved to agentcore_rl_harness.run.training",
              DeprecationWarning, stacklevel=2)

__all__ = ["EXCLUDED", "RowSchedule", "TrainPlan", "TrainingLoop", "build_groups", "training_reward"]
