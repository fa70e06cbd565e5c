"""Session-wide caps (`runtime.limits.session_*`): abusive sessions end as resource_exceeded.

Real agents (`agents/abuse_agent.py`) fork, allocate, write and print through the real
LocalRuntime under real bubblewrap, each attack bounded by itself as well, with small caps (this
machine is shared); a well-behaved session runs beside them and must complete. Once with the
mechanism this machine offers (a per-session cgroup where the harness may make one), once with
the documented fallback (the process-tree watchdog) forced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
from pathlib import Path

import pytest

from acr_stub import AGENTS
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.config_schema import build
from agentcore_rl_harness.errors import ConfigError, SandboxError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes import _session_caps
from agentcore_rl_harness.runtimes._cgroups import CgroupLayout, find_cgroups
from agentcore_rl_harness.runtimes._session_caps import Caps, check_agentcore_limits
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.isolation import IsolationChoice, SandboxLimits, build_isolation
from agentcore_rl_harness.runtimes.local import LocalRuntime

ABUSE = AgentRef(task="abuse", agent=str(AGENTS / "abuse_agent.py"))
CAPS = SandboxLimits(session_memory_mb=200, session_disk_mb=48, session_pids=64, session_cpu=1.0,
                     session_result_mb=4)
# attack payload -> the cap its error must name
ATTACKS = {
    "fork_bomb": ({"attack": "fork_bomb", "count": 300, "deadline_s": 20}, "session_pids=64"),
    "memory_hog": ({"attack": "memory_hog", "procs": 3, "mb_each": 100, "deadline_s": 20},
                   "session_memory_mb=200"),
    "disk_filler": ({"attack": "disk_filler", "mb": 100}, "session_disk_mb=48"),
    "tmp_filler": ({"attack": "disk_filler", "mb": 100, "where": "/tmp"}, "session_disk_mb=48"),
    "output_flood": ({"attack": "output_flood", "mb": 100}, "session_disk_mb=48"),
    "big_result": ({"attack": "big_result", "mb": 8}, "session_result_mb=4"),
}


def _session_mounts() -> set[str]:
    mine = f"/arl-{os.getpid()}-"  # this process's session dirs: other runs may be going on
    return {line.split()[1] for line in _mounts().splitlines() if mine in line}


def _cgroup_dirs() -> set[str]:
    layout = find_cgroups()
    if not isinstance(layout, CgroupLayout):
        return set()
    mine = f"arl-session-{os.getpid()}-*"  # this process's sessions: other runs may be going on
    return {str(p) for parent in layout.parents.values() for p in parent.glob(mine)}


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone"
    return status.split("State:")[1].split()[0]


async def _live_sandbox(runtime, session_id, timeout_s=60.0):
    """The session's sandbox once a command runs in it (the session has started)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        with contextlib.suppress(SandboxError):
            sandbox = runtime.sandbox(session_id)
            if (await sandbox.exec(["true"], timeout=10)).ok:
                return sandbox
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {session_id} did not start within {timeout_s}s")


def _mounts() -> str:
    return Path("/proc/mounts").read_text()


@pytest.mark.asyncio
@pytest.mark.parametrize("mechanism", ["this-machine", "watchdog"])
async def test_abusive_sessions_end_resource_exceeded_while_a_neighbour_completes(
        mechanism, monkeypatch, caplog):
    if mechanism == "watchdog":
        monkeypatch.setattr(_session_caps, "find_cgroups", lambda: "forced off by the test")
    cgroups_before = _cgroup_dirs()
    mounts_before = _session_mounts()  # another run's leftovers (a SIGKILLed harness) are not ours
    caplog.set_level(logging.INFO, logger="agentcore_rl_harness.runtimes.local")
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=len(ATTACKS) + 1, startup_timeout_s=60), isolation=IsolationChoice(kind="bwrap", limits=CAPS))
    try:
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("session caps:")]
        assert len(said) == 1 and "disk 48 MB via a size-limited tmpfs" in said[0]
        if mechanism == "watchdog":
            assert "process-tree watchdog (no cgroup: forced off by the test)" in said[0]
            assert "cpu 1 cores NOT applied" in said[0]
        bad = [runtime.run_session(agent=ABUSE, session_id=f"abuse-{name}", payload=payload,
                                   timeout_s=90, keep_state=True)
               for name, (payload, _) in ATTACKS.items()]
        good = runtime.run_session(agent=ABUSE, session_id="neighbour", timeout_s=90,
                                   payload={"attack": "well_behaved", "sleep_s": 3})
        *outcomes, neighbour = await asyncio.gather(*bad, good)
        assert neighbour.status is Status.COMPLETED, neighbour.error
        assert neighbour.result["ok"] is True
        for (name, (_, cap)), outcome in zip(ATTACKS.items(), outcomes):
            assert outcome.status is Status.AGENT_ERROR, (name, outcome.result)
            assert outcome.error.startswith(f"resource_exceeded: {cap}"), (name, outcome.error)
            assert outcome.final_state is not None or outcome.final_state_error, name
        assert "output flood" in outcomes[list(ATTACKS).index("output_flood")].error
        # the harness goes on: the runtime serves a new session, nothing of the others is left
        after = await runtime.run_session(agent=ABUSE, session_id="after", timeout_s=60,
                                          payload={"attack": "well_behaved"})
        assert after.status is Status.COMPLETED, after.error
        assert runtime.live_sessions == 0
        assert _cgroup_dirs() == cgroups_before
        assert _session_mounts() <= mounts_before
    finally:
        await runtime.aclose()


@pytest.mark.asyncio
async def test_a_sigterm_ignoring_daemon_does_not_outlive_its_session():
    """Without namespaces (isolation=none) a double-forked setsid daemon leaves the process
    group; the session's cgroup still holds it, and ending the session kills it."""
    if not isinstance(find_cgroups(), CgroupLayout):
        pytest.fail("this test needs a writable cgroup (CI runs as root on a machine that has one)")
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=60, start_method="spawn"), isolation=IsolationChoice(kind="none", limits=CAPS))
    try:
        outcome = await runtime.run_session(agent=ABUSE, session_id="daemon", timeout_s=60,
                                            payload={"attack": "daemon", "live_s": 30})
        assert outcome.status is Status.COMPLETED, outcome.error
        assert _state(outcome.result["daemon_pid"]) in ("gone", "Z")  # killed (init reaps it)
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(("key", "value", "message"), [
    ("session_memory_mb", 0, "runtime.limits.session_memory_mb must be >= > 0 or null"),
    ("session_memory_mb", "lots", "session_memory_mb must be an integer, 'auto' or null"),
    ("session_disk_mb", -5, "session_disk_mb must be >= > 0"),
    ("session_disk_mb", "auto", "session_disk_mb must be an integer or null"),
    ("session_pids", 3, "session_pids must be >= 8"),
    ("session_pids", True, "session_pids must be an integer or null"),
    ("session_cpu", "fast", "session_cpu must be a number of cores, 'auto' or null"),
    ("session_cpu", 0, "session_cpu must be >= > 0"),
])
def test_bad_caps_are_config_errors_naming_key_and_value(key, value, message):
    limits = SandboxLimits(**{key: value})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as caught:
        limits.check()
    assert repr(value) in str(caught.value)
    with pytest.raises(ConfigError):  # the local runtime refuses them when built
        LocalRuntime(LocalRuntimeConfig(), isolation=IsolationChoice(kind="none", limits=limits))
    with pytest.raises(ConfigError):  # and so does runtime=agentcore
        check_agentcore_limits(limits)


def test_config_keys_are_typed_and_defaults_are_on():
    runtime = build(LocalRuntimeConfig, {"limits": {"session_memory_mb": 256, "session_disk_mb": 128,
                                               "session_pids": 100, "session_cpu": 0.5}}, "runtime")
    assert runtime.limits.session_memory_mb == 256 and runtime.limits.session_cpu == 0.5
    with pytest.raises(ConfigError, match="runtime.limits.session_pids"):
        build(LocalRuntimeConfig, {"limits": {"session_pids": [1]}}, "runtime")
    caps = Caps.resolve(SandboxLimits(), concurrency=8)
    ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert caps.memory_mb == max(256, int(ram_mb * 0.5 / 8))
    assert (caps.disk_mb, caps.pids, caps.result_mb) == (1024, 512, 64)
    assert caps.cpu == max(1, (os.cpu_count() or 2) // 2)
    off = Caps.resolve(SandboxLimits(session_memory_mb=None, session_cpu=None), concurrency=8)
    assert off.memory_mb is None and off.cpu is None


def test_agentcore_names_the_keys_it_cannot_apply(caplog):
    assert check_agentcore_limits(SandboxLimits()) == []
    chosen = SandboxLimits(session_memory_mb=512, session_pids=64)
    with caplog.at_level(logging.WARNING):
        assert check_agentcore_limits(chosen) == ["session_memory_mb=512", "session_pids=64"]
    assert "cannot apply runtime.limits session_memory_mb=512, session_pids=64" in caplog.text


def test_cgroup_v2_layout_writes_the_limits_and_joins_before_exec(tmp_path):
    """The v2 file protocol, on a directory laid out like a delegated cgroup v2 tree."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text("0::/\n")
    layout = find_cgroups(root=tmp_path, self_cgroup=self_cgroup)
    assert layout == CgroupLayout(2, {"unified": tmp_path})
    group = layout.create(memory_bytes=200 * 2**20, pids=64, cpu=0.5)
    (where,) = group.dirs.values()
    assert (where / "memory.max").read_text() == f"{200 * 2**20}\n"
    assert (where / "pids.max").read_text() == "64\n"
    assert (where / "cpu.max").read_text() == "50000 100000\n"
    assert group.join_argv()[-2:] == [str(where / "cgroup.procs"), "--"]
    (where / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    (where / "pids.events").write_text("max 0\n")
    assert "killed 1 of its processes" in group.memory_breach()
    assert group.pids_breach() is None


def test_a_uid_session_counts_its_processes_per_own_uid():
    """isolation=uid: RLIMIT_NPROC counts per uid, and each session has its own: session_pids
    bounds it even without a cgroup."""
    isolation = build_isolation(IsolationChoice(kind="uid", limits=SandboxLimits(session_pids=64)))
    assert isolation.limits.processes == 64
    assert ("--nproc", resource.RLIMIT_NPROC, 64) in isolation.limits.values()


@pytest.mark.asyncio
async def test_commands_run_in_a_live_session_count_against_its_caps():
    """`sandbox(...).exec` joins the session's cgroup: a fork loop started that way ends the
    session as resource_exceeded too (bounded: 200 sleeps of 5 s)."""
    if not isinstance(find_cgroups(), CgroupLayout):
        pytest.fail("this test needs a writable cgroup (CI runs as root on a machine that has one)")
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=60), isolation=IsolationChoice(kind="bwrap", limits=CAPS))
    try:
        session = asyncio.create_task(runtime.run_session(
            agent=ABUSE, session_id="live", timeout_s=60,
            payload={"attack": "well_behaved", "sleep_s": 30}))
        sandbox = await _live_sandbox(runtime, "live")
        with contextlib.suppress(SandboxError):  # the session may end before the command does
            await sandbox.exec(["sh", "-c", "for i in $(seq 200); do sleep 5 & done; wait"],
                               timeout=15)
        outcome = await session
        assert outcome.status is Status.AGENT_ERROR
        assert outcome.error.startswith("resource_exceeded: session_pids=64 exceeded"), outcome.error
    finally:
        await runtime.aclose()


def test_the_config_keys_reach_the_runtime_and_agentcore_names_what_it_cannot_apply(caplog):
    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.run.compose import build_runtime

    caplog.set_level(logging.INFO, logger="agentcore_rl_harness.runtimes")
    config = compose_config(["runtime.limits.session_memory_mb=300", "runtime.limits.session_pids=40",
                             "runtime.limits.session_disk_mb=50", "runtime.limits.session_cpu=0.5",
                             "runtime.isolation=none"]).typed
    runtime = build_runtime(config)
    assert runtime.caps.caps == Caps(memory_mb=300, disk_mb=50, pids=40, cpu=0.5, result_mb=64)
    assert "session caps: memory 300 MB, pids 40 via" in caplog.text
    with pytest.raises(ConfigError, match="runtime.limits.session_pids must be >= 8"):
        build_runtime(compose_config(["runtime.limits.session_pids=2"]).typed)
    with pytest.raises(ConfigError, match="config key runtime.limits.session_memory_mb must be int"):
        compose_config(["runtime.limits.session_memory_mb=[1]"]).typed
    with pytest.raises(ConfigError, match="session_memory_mb must be an integer, 'auto' or null"):
        build_runtime(compose_config(["runtime.limits.session_memory_mb=lots"]).typed)
    pytest.importorskip("boto3")
    agentcore = compose_config(["runtime=agentcore", "+runtime.limits.session_memory_mb=512",
                                "+runtime.arns.x=arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/x-1"]).typed
    caplog.clear()
    asyncio.run(build_runtime(agentcore).aclose())
    assert "cannot apply runtime.limits session_memory_mb=512" in caplog.text


def test_without_a_tmpfs_the_watchdog_measures_the_session_dir(tmp_path):
    """Not root (no mount): the directory's size is summed; over session_disk_mb is a breach."""
    caps = _session_caps.SessionCaps(Caps(memory_mb=None, disk_mb=1, pids=None, cpu=None,
                                          result_mb=None), can_mount=False)
    box = caps.open(tmp_path)
    try:
        assert not box.mounted and box.check() is None
        (tmp_path / "big.bin").write_bytes(b"x" * (2 * 2**20))
        for _ in range(_session_caps.TREE_SIZE_EVERY):
            box.check()
        assert box.breach.startswith("session_disk_mb=1 exceeded: 2 MB written under")
    finally:
        box.close()


def _dead_pid() -> int:
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs and making cgroups need root")
def test_what_a_killed_harness_left_is_swept_at_the_next_start(tmp_path):
    """A SIGKILLed harness runs no atexit: its session cgroups and session tmpfs stay behind.
    The next runtime on the machine removes those whose harness pid is gone, and only those."""
    dead, alive = _dead_pid(), os.getpid()
    layout = find_cgroups()
    made = []
    if isinstance(layout, CgroupLayout):
        for pid in (dead, alive):
            for parent in layout.parents.values():
                (parent / f"arl-session-{pid}-999").mkdir()
                made.append(parent / f"arl-session-{pid}-999")
    libc = _session_caps._libc()
    dirs = {pid: tmp_path / f"arl-{pid}-abc" for pid in (dead, alive)}
    for path in dirs.values():
        path.mkdir()
        assert libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, b"size=1m") == 0
        (path / "left.txt").write_text("x")
    try:
        from agentcore_rl_harness.runtimes._stale import sweep_stale, sweep_stale_mounts

        assert sweep_stale_mounts(libc) >= 1  # other stale ones on the machine go too
        assert not dirs[dead].exists() and str(dirs[dead]) not in _mounts()
        assert (dirs[alive] / "left.txt").exists()  # a live harness's session is not touched
        if isinstance(layout, CgroupLayout):
            assert sweep_stale(layout) >= len(layout.parents)
            assert all(not p.exists() for p in made if f"-{dead}-" in p.name)
            assert all(p.exists() for p in made if f"-{alive}-" in p.name)
    finally:
        libc.umount2(str(dirs[alive]).encode(), 2)
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()
