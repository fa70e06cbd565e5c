"""The quotas' seam without Ray: priority pacing and slots, the local limiter, the lease table
that the Ray actor hosts (its reaping on a fake clock), and the config's errors."""

from __future__ import annotations

import asyncio

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.runtimes._rate import SlotPool, TokenBucket
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.limits import (
    EVALUATION_PRIORITY,
    TRAINING_PRIORITY,
    LimiterSettings,
    LocalLimiter,
    Priorities,
    SessionLimiter,
    build_limiter,
)
from agentcore_rl_harness.runtimes.ray_limiter import LeaseTable

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/a-Ab12Cd34Ef"


@pytest.mark.asyncio
async def test_bucket_serves_higher_priority_waiters_first():
    bucket = TokenBucket(100.0)
    await bucket.acquire()  # the one token up front: everyone below waits
    order: list[str] = []

    async def take(name: str, priority: int) -> None:
        await bucket.acquire(priority)
        order.append(name)

    tasks = [asyncio.create_task(take(f"train{i}", 0)) for i in range(3)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(take(f"eval{i}", 1)) for i in range(2)]
    await asyncio.gather(*tasks)
    assert order == ["eval0", "eval1", "train0", "train1", "train2"]


@pytest.mark.asyncio
async def test_bucket_paces_at_its_rate_and_a_cancelled_waiter_takes_nothing(monkeypatch):
    clock = StepClock(lag=0.0)
    real_sleep = asyncio.sleep

    async def exact_sleep(delay: float) -> None:
        await real_sleep(0)
        clock.now += delay

    monkeypatch.setattr(asyncio, "sleep", exact_sleep)
    bucket = TokenBucket(50.0, clock=clock)
    await bucket.acquire()
    doomed = asyncio.create_task(bucket.acquire())
    await real_sleep(0)
    doomed.cancel()
    started = clock.now
    grants: list[float] = []
    for _ in range(5):
        await bucket.acquire()
        grants.append(clock.now - started)
    # one grant every 20 ms (the first is 10 ms in: half a token of catch-up slack after the
    # first grant); a token spent on the cancelled waiter would push each one 20 ms later
    assert grants == pytest.approx([0.01, 0.03, 0.05, 0.07, 0.09], abs=1e-9)


class StepClock:
    """A clock the test moves; `asyncio.sleep` in the bucket advances it by what was asked, plus
    a late wake-up of `lag` (a busy event loop)."""

    def __init__(self, lag: float) -> None:
        self.now, self.lag = 0.0, lag

    def __call__(self) -> float:
        return self.now


@pytest.mark.asyncio
async def test_a_saturated_bucket_keeps_its_rate_through_late_wakeups(monkeypatch):
    clock = StepClock(lag=0.004)  # 4 ms late on every 40 ms step: a cap-at-burst bucket loses 9%
    real_sleep = asyncio.sleep

    async def late_sleep(delay: float) -> None:
        await real_sleep(0)  # the callers granted so far note the time first
        clock.now += delay + clock.lag

    monkeypatch.setattr(asyncio, "sleep", late_sleep)
    bucket = TokenBucket(25.0, clock=clock)
    grants: list[float] = []

    async def caller() -> None:
        while len(grants) < 500:
            await bucket.acquire()
            grants.append(clock.now)

    await asyncio.gather(*(caller() for _ in range(8)))
    rate = (len(grants) - 1) / (grants[-1] - grants[0])
    assert 24.9 <= rate <= 25.1
    in_one_second = max(sum(1 for t in grants[i:] if t - start < 1.0) for i, start in enumerate(grants))
    assert in_one_second <= 26  # 25 per second plus the half token of slack, rounded down


@pytest.mark.asyncio
async def test_slot_pool_caps_holders_and_hands_slots_on_by_priority():
    pool = SlotPool(2)
    await pool.acquire()
    await pool.acquire()
    order: list[int] = []

    async def wait(priority: int) -> None:
        await pool.acquire(priority)
        order.append(priority)

    waiters = [asyncio.create_task(wait(p)) for p in (0, 5, 1)]
    await asyncio.sleep(0)
    assert pool.held == 2 and pool.waiting == 3
    for _ in range(3):
        pool.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == [5, 1, 0] and pool.peak == 2 and pool.held == 2


@pytest.mark.asyncio
async def test_slot_pool_waiter_cancelled_after_its_grant_hands_the_slot_on():
    pool = SlotPool(1)
    await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    second = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    pool.release()  # granted to `first`, which is cancelled before it runs
    first.cancel()
    await asyncio.wait_for(second, 1)
    assert pool.held == 1
    with pytest.raises(asyncio.CancelledError):
        await first


def test_priorities_put_evaluation_before_training_unless_the_task_says():
    priorities = Priorities(by_task={"test_urgent": 7})
    assert priorities.of(AgentRef(task="t", agent=None, phase="pre")) == EVALUATION_PRIORITY
    assert priorities.of(AgentRef(task="t", agent=None, phase="eval")) == EVALUATION_PRIORITY
    assert priorities.of(AgentRef(task="t", agent=None, phase="train")) == TRAINING_PRIORITY
    assert priorities.of(AgentRef(task="t", agent=None)) == TRAINING_PRIORITY
    assert priorities.of(AgentRef(task="test_urgent", agent=None, phase="train")) == 7


@pytest.mark.asyncio
async def test_local_limiter_is_a_session_limiter_that_caps_live_sessions():
    limiter = build_limiter(LimiterSettings(), tps_per_arn={ARN: 1000.0}, concurrency=3)
    assert isinstance(limiter, LocalLimiter) and isinstance(limiter, SessionLimiter)
    live = 0
    peak = 0

    async def session() -> None:
        nonlocal live, peak
        async with limiter.slot(priority=0):
            live += 1
            peak = max(peak, live)
            await limiter.pace(arn=ARN, priority=0)
            await asyncio.sleep(0.01)
            live -= 1

    await asyncio.gather(*(session() for _ in range(10)))
    assert peak == 3 == limiter.peak_live


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (LimiterSettings(kind="redis"), r"runtime.limiter.kind='redis' .*valid choices: \['local', 'ray'\]"),
        (LimiterSettings(max_live_sessions=0), "runtime.limiter.max_live_sessions=0 must be >= 1"),
        (LimiterSettings(lease_ttl_s=0), "runtime.limiter.lease_ttl_s=0 must be > 0"),
    ],
)
def test_bad_limiter_settings_name_the_key(settings, message):
    with pytest.raises(ConfigError, match=message):
        build_limiter(settings, tps_per_arn={ARN: 25.0}, concurrency=4)


def test_the_runtime_group_carries_the_limiter_node():
    typed = compose_config(
        ["runtime=agentcore", "runtime.limiter.kind=ray", "+runtime.priorities.test_x=3",
         "runtime.limiter.max_live_sessions=64"]
    ).typed.runtime
    assert (typed.limiter.kind, typed.priorities, typed.limiter.max_live_sessions) == ("ray", {"test_x": 3}, 64)
    assert compose_config(["runtime=agentcore"]).typed.runtime.limiter == LimiterSettings()


@pytest.mark.parametrize(("old", "new"), [
    ("runtime.limiter=ray", "runtime.limiter.kind=ray"),
    ("runtime.max_live_sessions=64", "runtime.limiter.max_live_sessions=64"),
    ("runtime.ray_address=auto", "runtime.limiter.ray_address=auto"),
    ("runtime.limiter_name=mine", "runtime.limiter.name=mine"),
    ("runtime.lease_ttl_s=5", "runtime.limiter.lease_ttl_s=5"),
])
def test_an_old_flat_limiter_key_is_refused_naming_its_new_key(old, new):
    with pytest.raises(ConfigError, match=f"config key {old.split('=')[0]} is .*: set {new} "):
        compose_config(["runtime=agentcore", old])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.asyncio
async def test_lease_table_takes_back_a_silent_holders_slots():
    clock = FakeClock()
    table = LeaseTable(lease_ttl_s=10.0, clock=clock)
    assert table.configure(holder="a", tps_per_arn={ARN: 25.0}, max_live_sessions=2) is None
    assert table.configure(holder="b", tps_per_arn={ARN: 25.0}, max_live_sessions=2) is None
    assert await table.acquire(holder="a", lease_id="a1", priority=0)
    assert await table.acquire(holder="a", lease_id="a2", priority=0)
    waiting = asyncio.create_task(table.acquire(holder="b", lease_id="b1", priority=0))
    await asyncio.sleep(0)
    assert not waiting.done() and table.stats()["live"] == 2
    clock.now += 6
    table.heartbeat("b")
    clock.now += 6  # a: silent for 12 s > 10 s; b: 6 s
    table._reap()
    assert await asyncio.wait_for(waiting, 1) is True
    stats = table.stats()
    assert (stats["live"], stats["reclaimed"], stats["holders"]) == (1, 2, 1)
    table.release("a1", "a")  # the dead holder's late release frees nothing twice
    assert table.stats()["live"] == 1


@pytest.mark.asyncio
async def test_lease_table_release_before_grant_and_a_conflicting_quota():
    table = LeaseTable(lease_ttl_s=10.0)
    table.configure(holder="a", tps_per_arn={ARN: 25.0}, max_live_sessions=1)
    assert await table.acquire(holder="a", lease_id="a1", priority=0)
    late = asyncio.create_task(table.acquire(holder="a", lease_id="a2", priority=0))
    await asyncio.sleep(0)
    table.release("a2", "a")  # its caller gave up before the grant
    table.release("a1", "a")
    assert await asyncio.wait_for(late, 1) is False
    assert table.stats()["live"] == 0
    conflict = table.configure(holder="b", tps_per_arn={ARN: 50.0}, max_live_sessions=1)
    assert conflict and "runtime.tps_per_arn=50" in conflict and "holds 25" in conflict
    table.close_holder("a")  # once nobody else is left, a new job may bring its own quota
    assert table.configure(holder="b", tps_per_arn={ARN: 50.0}, max_live_sessions=1) is None
    assert table.stats()["rates"] == {ARN: 50.0}
