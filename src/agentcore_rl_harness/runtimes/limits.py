"""The `SessionLimiter` seam: AgentCore quotas (calls per second per ARN, live sessions).

`runtime.limiter.kind=local` (the default) holds them in this process; `runtime.limiter.kind=ray` in a
named, detached Ray actor that every process of a job shares (`ray_limiter.py`): harness
processes, verl agent-loop workers, slime rollout functions. Both serve waiters by priority:
evaluation sessions (pre, post, eval) before training rollouts, unless `runtime.priorities`
gives a task its own; StopRuntimeSession calls come before any invoke, since they free slots.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import AsyncContextManager, Protocol, runtime_checkable

from ..errors import ConfigError
from ._rate import SlotPool, TokenBucket
from .base import AgentRef

LIMITERS = ("local", "ray")
EVALUATION_PHASES = frozenset({"pre", "post", "eval"})
EVALUATION_PRIORITY = 1
TRAINING_PRIORITY = 0
STOP_PRIORITY = 1 << 30
"""Stops outrank every session: each one frees a live slot (and costs the same token)."""


@runtime_checkable
class SessionLimiter(Protocol):
    def slot(self, *, priority: int) -> AsyncContextManager[None]:
        """Hold one live-session slot while the context is open; higher priority is served first."""
        ...

    async def pace(self, *, arn: str, priority: int) -> None:
        """Wait for one call token of `arn` (invokes and stops share it)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Priorities:
    """A session's priority: its task's entry in `runtime.priorities`, else by phase."""

    by_task: Mapping[str, int] = field(default_factory=dict)

    def of(self, agent: AgentRef) -> int:
        if agent.task in self.by_task:
            return int(self.by_task[agent.task])
        return EVALUATION_PRIORITY if agent.phase in EVALUATION_PHASES else TRAINING_PRIORITY


class LocalLimiter:
    """This process's own quotas: one token bucket per ARN, one slot pool; implements the seam."""

    def __init__(self, *, tps_per_arn: Mapping[str, float], max_live_sessions: int) -> None:
        self._buckets = {arn: TokenBucket(rate) for arn, rate in tps_per_arn.items()}
        self._slots = SlotPool(max_live_sessions)

    @property
    def peak_live(self) -> int:
        return self._slots.peak

    @contextlib.asynccontextmanager
    async def slot(self, *, priority: int) -> AsyncIterator[None]:
        await self._slots.acquire(priority)
        try:
            yield
        finally:
            self._slots.release()

    async def pace(self, *, arn: str, priority: int) -> None:
        await self._buckets[arn].acquire(priority)

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class LimiterSettings:
    """The `runtime.limiter` node of `runtime=agentcore`: which limiter holds the quotas, and where
    the shared one lives."""

    # local: this process holds the quotas; ray: a named Ray actor every process of the job shares
    # (harness processes, verl/slime workers)
    kind: str = "local"
    max_live_sessions: int | None = None  # live sessions at once (ray: across all processes); null = runtime.concurrency
    ray_address: str | None = None  # kind=ray: null = the Ray this process runs in, else RAY_ADDRESS or auto
    name: str = "agentcore-rl-limiter"  # kind=ray: the actor's name (namespace agentcore-rl)
    lease_ttl_s: float = 30.0  # kind=ray: the slots of a process silent this long are taken back

    def check(self) -> None:
        if self.kind not in LIMITERS:
            raise ConfigError(
                f"runtime.limiter.kind={self.kind!r} is not a limiter; valid choices: {list(LIMITERS)}"
            )
        if self.max_live_sessions is not None and self.max_live_sessions < 1:
            raise ConfigError(
                f"runtime.limiter.max_live_sessions={self.max_live_sessions} must be >= 1 (or null: "
                "runtime.concurrency)"
            )
        if self.lease_ttl_s <= 0:
            raise ConfigError(f"runtime.limiter.lease_ttl_s={self.lease_ttl_s} must be > 0 seconds")
        if not self.name:
            raise ConfigError("runtime.limiter.name is empty; name the shared limiter actor")


def build_limiter(
    settings: LimiterSettings, *, tps_per_arn: Mapping[str, float], concurrency: int
) -> SessionLimiter:
    """The configured limiter for these ARNs (Ray is imported only for `ray`)."""
    settings.check()
    cap = settings.max_live_sessions or concurrency
    if settings.kind == "local":
        return LocalLimiter(tps_per_arn=tps_per_arn, max_live_sessions=cap)
    from .ray_limiter import RayLimiter

    return RayLimiter(
        tps_per_arn=tps_per_arn, max_live_sessions=cap, address=settings.ray_address,
        name=settings.name, lease_ttl_s=settings.lease_ttl_s,
    )
