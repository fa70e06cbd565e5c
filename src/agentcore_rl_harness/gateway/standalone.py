"""Deprecated: `agentcore-rl gateway` lives in `agentcore_rl_harness.standalone_gateway` now (it
builds samplers, which sit above the gateway). This path works for one more release."""

import warnings

from ..standalone_gateway import SAMPLERS, build_sampler, run_standalone

warnings.warn(
    "agentcore_rl_harness.gateway.standalone moved to agentcore_rl_harness.standalone_gateway",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["SAMPLERS", "build_sampler", "run_standalone"]
