"""Deprecated: scoring lives in `agentcore_rl_harness.run.scoring` now. This path works for one
more release."""

import warnings

from .run.scoring import (
    OFFLINE_FIXTURES, RolloutHandle, Scorer, Verdict, agent_reward, apply_agent_reward, apply_rewards,
    check_handle_rewards, check_reward, drop_bad_rewards, failure_text, make_rollout, offline_arguments,
    score_offline,
)

warnings.warn("agentcore_rl_harness.scoring moved to agentcore_rl_harness.run.scoring",
              DeprecationWarning, stacklevel=2)

__all__ = [
    "OFFLINE_FIXTURES", "RolloutHandle", "Scorer", "Verdict", "agent_reward", "apply_agent_reward",
    "apply_rewards", "check_handle_rewards", "check_reward", "drop_bad_rewards", "failure_text",
    "make_rollout", "offline_arguments", "score_offline",
]
