"""`runtime.limiter.kind=ray`: the AgentCore quotas held by one named, detached Ray actor per job.

Every process that builds an `agentcore` runtime with the same `runtime.limiter.name` on one Ray
cluster (harness processes, verl agent-loop workers, slime rollout functions) shares the actor's
per-ARN token buckets and its live-session cap, so N processes together stay within one ARN's
quota. A live-session slot is a lease: each process heartbeats its leases every
`lease_ttl_s / 3`, and the actor takes back the slots of a process silent for `lease_ttl_s`
(a killed worker, a lost node), so a dead process never keeps slots.

`LeaseTable` is the actor's body, plain Python over `_rate.py` (tested without Ray too);
`RayLimiter` is the client side, an implementation of `limits.SessionLimiter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, Callable

from ..errors import ConfigError, MissingDependencyError, RuntimeStartError
from ._rate import SlotPool, TokenBucket
from .ray_loopback import SINGLE_NODE_ENV, address_host, is_loopback, use_single_node_mode

logger = logging.getLogger(__name__)

NAMESPACE = "agentcore-rl"
MAX_WAITERS = 100_000
"""The actor's concurrency: every waiting session and call is one pending actor task."""


class LeaseTable:
    """The shared quotas: token buckets by ARN, a slot pool whose slots are leases of holders."""

    def __init__(self, *, lease_ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_ttl_s = lease_ttl_s
        self._clock = clock
        self._rates: dict[str, float] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._slots: SlotPool | None = None
        self._leases: dict[str, str] = {}  # lease id -> holder
        self._abandoned: dict[str, str] = {}  # released before it was granted -> holder
        self._beats: dict[str, float] = {}  # holder -> last heartbeat
        self._reaper: asyncio.Task[None] | None = None
        self.reclaimed = 0

    def configure(
        self, *, holder: str, tps_per_arn: Mapping[str, float], max_live_sessions: int
    ) -> str | None:
        """Join with these quotas; a conflict with live holders is returned as the error text."""
        self._reap()
        others = set(self._beats) - {holder}
        conflicts = [
            f"runtime.tps_per_arn={rate:g} for {arn} (the shared limiter holds {self._rates[arn]:g})"
            for arn, rate in tps_per_arn.items()
            if arn in self._rates and self._rates[arn] != rate
        ]
        if self._slots is not None and self._slots.capacity != max_live_sessions:
            conflicts.append(
                f"runtime.limiter.max_live_sessions={max_live_sessions} (the shared limiter holds "
                f"{self._slots.capacity})"
            )
        if conflicts and others:
            return (
                f"this process's quotas differ from those of the {len(others)} process(es) "
                f"sharing the limiter: {'; '.join(conflicts)}. Give every process of the job the "
                "same values, or another runtime.limiter.name"
            )
        for arn, rate in tps_per_arn.items():
            if self._rates.get(arn) != rate:
                self._rates[arn] = rate
                self._buckets[arn] = TokenBucket(rate)
        if self._slots is None:
            self._slots = SlotPool(max_live_sessions)
        elif self._slots.capacity != max_live_sessions:
            self._slots.capacity = max_live_sessions
        self.heartbeat(holder)
        return None

    def heartbeat(self, holder: str) -> None:
        self._beats[holder] = self._clock()

    async def pace(self, *, holder: str, arn: str, priority: int) -> None:
        self._start_reaper()
        self.heartbeat(holder)
        await self._buckets[arn].acquire(priority)

    async def acquire(self, *, holder: str, lease_id: str, priority: int) -> bool:
        """Wait for a slot; False if the lease was released or its holder reaped meanwhile."""
        self._start_reaper()
        self.heartbeat(holder)
        slots = self._pool()
        await slots.acquire(priority)
        if self._abandoned.pop(lease_id, None) is not None or holder not in self._beats:
            slots.release()
            return False
        self._leases[lease_id] = holder
        return True

    def release(self, lease_id: str, holder: str) -> None:
        if self._leases.pop(lease_id, None) is not None:
            self._pool().release()
        else:
            self._abandoned[lease_id] = holder

    def close_holder(self, holder: str) -> None:
        """A holder leaves: its leases are freed at once."""
        self._drop(holder)

    def stats(self) -> dict[str, Any]:
        slots = self._slots or SlotPool(1)
        return {
            "live": slots.held, "peak": slots.peak, "waiting": slots.waiting,
            "capacity": self._slots and self._slots.capacity, "holders": len(self._beats),
            "reclaimed": self.reclaimed, "rates": dict(self._rates),
        }

    def _pool(self) -> SlotPool:
        if self._slots is None:
            raise RuntimeError("the shared limiter was used before configure()")
        return self._slots

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 4)
            self._reap()

    def _reap(self) -> None:
        deadline = self._clock() - self.lease_ttl_s
        for holder in [holder for holder, beat in self._beats.items() if beat < deadline]:
            self.reclaimed += self._drop(holder)

    def _drop(self, holder: str) -> int:
        self._beats.pop(holder, None)
        leases = [lease for lease, owner in self._leases.items() if owner == holder]
        for lease in leases:
            del self._leases[lease]
            self._pool().release()
        for lease in [lease for lease, owner in self._abandoned.items() if owner == holder]:
            del self._abandoned[lease]
        return len(leases)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(
            "runtime.limiter.kind=ray needs Ray: pip install 'agentcore-rl-harness[ray]'"
        ) from exc
    return ray


def connect(address: str | None) -> Any:
    """The `ray` module, connected: the Ray this process is in, else `address` (or auto).

    A cluster at a loopback address listens there only (`ray_loopback`); joining it needs Ray's
    single-node mode here too."""
    ray = _import_ray()
    if not ray.is_initialized():
        target = address or os.environ.get("RAY_ADDRESS") or "auto"
        if is_loopback(address_host(target)):
            use_single_node_mode()
        try:
            ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            reason = f"{exc}: {exc.__cause__}" if exc.__cause__ else str(exc)  # e.g. Ray's auth
            raise ConfigError(
                f"runtime.limiter.kind=ray found no Ray cluster at {target} ({reason}); start one on "
                f"this machine only (`export {SINGLE_NODE_ENV}=0; ray start --head "
                "--include-dashboard=false`, the variable exported where the harness runs too) "
                "or join yours with runtime.limiter.ray_address (or RAY_ADDRESS), or use "
                "runtime.limiter.kind=local"
            ) from exc
    return ray


class RayLimiter:
    """The client of the job's shared `LeaseTable` actor; implements `limits.SessionLimiter`."""

    def __init__(
        self, *, tps_per_arn: Mapping[str, float], max_live_sessions: int, address: str | None,
        name: str, lease_ttl_s: float,
    ) -> None:
        self._ray = ray = connect(address)
        self.name = name
        self.lease_ttl_s = lease_ttl_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        actor_class = ray.remote(num_cpus=0, max_concurrency=MAX_WAITERS)(LeaseTable)
        self.actor = actor_class.options(
            name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True
        ).remote(lease_ttl_s=lease_ttl_s)
        conflict = ray.get(self.actor.configure.remote(
            holder=self.holder, tps_per_arn=dict(tps_per_arn), max_live_sessions=max_live_sessions
        ))
        if conflict:
            raise ConfigError(f"runtime.limiter.name={name!r}: {conflict}")
        self._heartbeat: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def slot(self, *, priority: int) -> AsyncIterator[None]:
        self._start_heartbeat()
        lease_id = uuid.uuid4().hex
        pending = self.actor.acquire.remote(holder=self.holder, lease_id=lease_id, priority=priority)
        try:
            granted = await pending
        except asyncio.CancelledError:
            self._ray.cancel(pending)
            self.actor.release.remote(lease_id, self.holder)
            raise
        if not granted:
            raise RuntimeStartError(
                f"the shared limiter {self.name!r} took back this process's session slot: no "
                f"heartbeat reached it for runtime.limiter.lease_ttl_s={self.lease_ttl_s:g}s (an "
                "overloaded process or a lost connection to Ray); raise runtime.limiter.lease_ttl_s"
            )
        try:
            yield
        finally:
            await self.actor.release.remote(lease_id, self.holder)

    async def pace(self, *, arn: str, priority: int) -> None:
        self._start_heartbeat()
        pending = self.actor.pace.remote(holder=self.holder, arn=arn, priority=priority)
        try:
            await pending
        except asyncio.CancelledError:
            self._ray.cancel(pending)
            raise

    async def stats(self) -> dict[str, Any]:
        return await self.actor.stats.remote()

    async def aclose(self) -> None:
        """Leave the shared limiter (its other users keep it; the actor is detached)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        await self.actor.close_holder.remote(self.holder)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat_forever())

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                await self.actor.heartbeat.remote(self.holder)
            except Exception as exc:  # the actor restarts or Ray reconnects: try again next beat
                logger.warning("heartbeat to the shared limiter %r failed: %s", self.name, exc)
