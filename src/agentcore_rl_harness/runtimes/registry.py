"""Which runtime serves each `runtime=<kind>` config group: its typed node and its builder.

The node classes are small and imported here; a runtime's module (and its dependencies, boto3
for `agentcore`) is imported only when that kind is built. A builder takes its node plus what
the run provides: ``factory(node, private_dirs=..., session_timeout_s=...)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .agentcore_config import LOCAL_ONLY_KEYS, MOVED_KEYS, AgentCoreRuntimeConfig
from .local_config import LocalRuntimeConfig


@dataclass(frozen=True)
class RuntimeSpec:
    config_class: type
    factory: str
    """"module:attr" of ``factory(node, *, private_dirs, session_timeout_s) -> AgentRuntime``."""
    moved_keys: Mapping[str, str] = field(default_factory=dict)
    """Old key -> its place in the node now: refused with a message naming the new key."""
    refused_keys: Mapping[str, str] = field(default_factory=dict)
    """Another kind's key that means nothing here -> why, and what to do instead (refused)."""

    def build(self, node: Any, *, private_dirs: tuple[Path, ...] = (), session_timeout_s: float | None = None) -> Any:
        module, _, attr = self.factory.partition(":")
        factory: Any = importlib.import_module(module)
        for name in attr.split("."):
            factory = getattr(factory, name)
        return factory(node, private_dirs=private_dirs, session_timeout_s=session_timeout_s)


_PKG = "agentcore_rl_harness.runtimes"

RUNTIMES: dict[str, RuntimeSpec] = {
    "local": RuntimeSpec(LocalRuntimeConfig, f"{_PKG}.local:LocalRuntime.for_run"),
    "agentcore": RuntimeSpec(AgentCoreRuntimeConfig, f"{_PKG}.agentcore:AgentCoreRuntime.for_run",
                             moved_keys=MOVED_KEYS, refused_keys=LOCAL_ONLY_KEYS),
}
"""kind -> spec. A new runtime adds itself here (one line)."""

DEFAULT_RUNTIME = "local"


def runtime_spec(kind: Any) -> RuntimeSpec:
    if kind not in RUNTIMES:
        raise ConfigError(f"runtime={kind!r} is not available; valid choices: {list(RUNTIMES)}")
    return RUNTIMES[kind]
