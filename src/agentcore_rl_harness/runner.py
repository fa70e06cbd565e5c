"""Deprecated: `Harness` (the composition root) lives in `agentcore_rl_harness.run.compose`, the
loop thread in `run.loop`, running one case in `run.episodes`. This path works for one more
release."""

import warnings

from .run.cases import Case, Episode, case_seed
from .run.compose import Harness, check_public_gateway_url
from .run.episodes import AGENT_SIDE_EVENTS, attribute_failure, new_session_id
from .run.loop import LoopThread

warnings.warn("agentcore_rl_harness.runner moved to agentcore_rl_harness.run (compose, loop, episodes)",
              DeprecationWarning, stacklevel=2)

__all__ = [
    "AGENT_SIDE_EVENTS", "Case", "Episode", "Harness", "LoopThread", "attribute_failure", "case_seed",
    "check_public_gateway_url", "new_session_id",
]
