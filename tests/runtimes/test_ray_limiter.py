"""`runtime.limiter=ray` on a real local Ray cluster: separate harness processes share one ARN's
quota and live-session cap through the named actor, against the ACR data-plane stub; a killed
process's slots come back. One cluster for the module (Ray starts slowly on 2 cores)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from acr_stub import AWS_TEST_ENV, load_agent_app, serve, serve_data_plane
from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.run.compose import build_runtime
from agentcore_rl_harness.runtimes.limits import LimiterSettings, build_limiter
from agentcore_rl_harness.runtimes.ray_limiter import NAMESPACE, RayLimiter
from agentcore_rl_harness.runtimes.ray_loopback import SINGLE_NODE_ENV, start_local
from listening_sockets import descendants, listeners

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/shared-Ab12Cd34Ef"
WORKER = Path(__file__).with_name("ray_limiter_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster started as the product starts one (on 127.0.0.1, no dashboard); yields
    its address (the GCS) for the worker processes, which join it."""
    env = {**AWS_TEST_ENV, "PYTHONPATH": os.pathsep.join(
        [str(SRC), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    previous = {name: os.environ.get(name) for name in [*env, SINGLE_NODE_ENV]}
    multi_node = ray._private.ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(env)  # the actor's worker process inherits them through the raylet
    try:
        yield start_local(num_cpus=1, log_to_driver=False, namespace=NAMESPACE)
    finally:
        ray.shutdown()
        ray._private.ray_constants.ENABLE_RAY_CLUSTER = multi_node
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def plane(cluster):
    _, app = load_agent_app("scripted_agent.py")
    agent = serve(app)
    with serve_data_plane({ARN: agent.url}) as stub:
        yield stub
    agent.stop()


def start_worker(plane, cluster: str, name: str, **flags) -> subprocess.Popen:
    argv = [sys.executable, str(WORKER), "--endpoint", plane.url, "--arn", ARN,
            "--ray-address", cluster, "--name", name]
    for flag, value in flags.items():
        argv += [f"--{flag.replace('_', '-')}", str(value)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))


def stats(name: str) -> dict:
    return ray.get(ray.get_actor(name, namespace=NAMESPACE).stats.remote())


def wait_until_held(name: str, worker: subprocess.Popen, slots: int) -> None:
    """Until the worker holds `slots` live sessions of the shared limiter `name`."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if stats(name)["live"] == slots:
                return
        except ValueError:  # the actor does not exist yet
            pass
        assert worker.poll() is None, worker.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"the worker never held its {slots} slots"
        time.sleep(0.2)


def test_four_processes_share_one_arns_rate_and_live_cap(cluster, plane, record_property):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    first_call = len(plane.invocations), len(plane.stops)
    workers = [start_worker(plane, cluster, name, sessions=64, tps=25, max_live=64)
               for _ in range(4)]
    summaries = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-3000:]
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    for summary in summaries:
        assert summary["statuses"] == {"completed": 64}, summary
    calls = sorted(
        [call["at"] for call in plane.invocations[first_call[0]:]]
        + [stop["at"] for stop in plane.stops[first_call[1]:]]
    )
    assert len(calls) == 4 * 64 * 2
    rate = (len(calls) - 1) / (calls[-1] - calls[0])
    record_property("aggregate_calls_per_s", round(rate, 3))
    per_second = sorted(collections.Counter(int(t - calls[0]) for t in calls).items())
    print(f"aggregate invoke+stop rate {rate:.3f}/s over {len(calls)} calls, peak live "
          f"{plane.peak_live}, calls per second {per_second}")
    # Never over the quota (the safety side, within 5%). The under side needs CPU: with the
    # machine to itself the rate is 24.98-25.03/s; on a box starved by other jobs (load 10-30 on
    # 2 cores) the actor's process stalls and it fell to 18-23/s, so there the floor is half.
    assert rate <= 1.05 * 25, f"aggregate invoke+stop rate {rate:.2f}/s, quota 25/s; per second: {per_second}"
    starved = os.getloadavg()[0] > 2 * (os.cpu_count() or 1)
    record_property("cpu_starved", starved)
    floor = 0.5 if starved else 0.95
    assert rate >= floor * 25, (f"aggregate invoke+stop rate {rate:.2f}/s, quota 25/s (floor {floor}x, "
                                f"load {os.getloadavg()[0]:.1f}); per second: {per_second}")
    # Arrivals at ACR jitter with thread and RPC scheduling; over any 10 s they keep the quota.
    busiest = max(sum(1 for t in calls[i:] if t - start < 10.0) for i, start in enumerate(calls))
    assert busiest <= 10 * 25 * 1.05, f"{busiest} calls within 10 s at ACR (quota 250)"
    assert plane.peak_live <= 64, f"{plane.peak_live} sessions live at once at ACR, cap 64"
    shared = stats(name)
    assert shared["peak"] == 64 and shared["live"] == 0 and shared["holders"] == 0


def test_four_processes_never_exceed_the_shared_live_cap_at_acr(cluster, plane):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    plane.peak_live = len(plane.live)
    workers = [start_worker(plane, cluster, name, sessions=16, tps=1000, max_live=8, sleep_s=0.5)
               for _ in range(4)]
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-3000:]
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["statuses"] == {"completed": 16}, summary["errors"]
    assert plane.peak_live == 8, f"{plane.peak_live} sessions live at once at ACR, cap 8"
    assert stats(name)["peak"] == 8


def test_a_killed_process_gives_its_slots_back(cluster, plane):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    victim = start_worker(plane, cluster, name, sessions=6, max_live=4, lease_ttl_s=2,
                          sleep_s=10, tps=1000)
    try:
        wait_until_held(name, victim, 4)
        assert stats(name)["waiting"] == 2
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        killed = time.monotonic()
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.communicate()

    async def take_all() -> float:
        limiter = build_limiter(
            LimiterSettings(kind="ray", max_live_sessions=4, name=name, lease_ttl_s=2),
            tps_per_arn={ARN: 1000.0}, concurrency=4,
        )
        assert isinstance(limiter, RayLimiter)
        async with limiter.slot(priority=0), limiter.slot(priority=0):
            async with limiter.slot(priority=0), limiter.slot(priority=0):
                granted = time.monotonic()
        await limiter.aclose()
        return granted

    granted = asyncio.run(asyncio.wait_for(take_all(), 30))
    assert granted - killed <= 2 * 1.25 + 1.0  # within the TTL plus one reaper period and slack
    after = stats(name)
    assert after["reclaimed"] == 4 and after["live"] == 0


def test_the_cluster_and_the_processes_that_join_it_listen_on_loopback_only(cluster, plane):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    joiner = start_worker(plane, cluster, name, sessions=2, max_live=2, sleep_s=8, tps=1000)
    try:
        wait_until_held(name, joiner, 2)  # now it, the actor and the cluster all listen
        found = listeners(descendants(os.getpid()))
    finally:
        out, err = joiner.communicate(timeout=120)
    assert joiner.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["statuses"] == {"completed": 2}
    names = {listener.name for listener in found}
    assert {"gcs_server", "raylet"} <= names, names
    assert joiner.pid in {listener.pid for listener in found}  # its core worker's server
    assert any(name.startswith("ray::") for name in names), names  # the actor's worker
    exposed = [listener for listener in found if not listener.loopback]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"


def test_a_second_process_with_another_quota_is_refused_by_name(cluster):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    first = build_limiter(LimiterSettings(kind="ray", name=name, max_live_sessions=8),
                          tps_per_arn={ARN: 25.0}, concurrency=8)
    with pytest.raises(ConfigError, match=r"runtime.limiter.name='limiter-.*runtime.tps_per_arn=50"):
        build_limiter(LimiterSettings(kind="ray", name=name, max_live_sessions=8),
                      tps_per_arn={ARN: 50.0}, concurrency=8)
    asyncio.run(first.aclose())


def test_the_config_builds_an_agentcore_runtime_on_the_shared_limiter(cluster, plane):
    name = f"limiter-{uuid.uuid4().hex[:8]}"
    config = compose_config([
        "runtime=agentcore", f"+runtime.arns.test_x={ARN}", "runtime.limiter.kind=ray",
        f"runtime.limiter.name={name}", "runtime.limiter.max_live_sessions=3", "runtime.tps_per_arn=40",
    ]).typed
    runtime = build_runtime(config)
    assert isinstance(runtime.limiter, RayLimiter)
    assert stats(name)["capacity"] == 3 and stats(name)["rates"] == {ARN: 40.0}
    asyncio.run(runtime.aclose())
    assert stats(name)["holders"] == 0
