"""Sessions of the `local` runtime are walled off from each other and from the harness.

A hostile agent (`agents/hostile_agent.py`) tries to list, read, write, signal and ptrace a live
victim session and the harness, through the real LocalRuntime under real bubblewrap; the uid
fallback's walls are checked with real processes under real per-session uids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from acr_stub import AGENTS
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.errors import ConfigError, SandboxError
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.isolation import (
    Bubblewrap,
    IsolationChoice,
    NoIsolation,
    SandboxLimits,
    SessionUid,
    build_isolation,
)
from agentcore_rl_harness.runtimes.local import LocalRuntime

HOSTILE = AgentRef(task="hostile", agent=str(AGENTS / "hostile_agent.py"))
ATTACKS = (
    "list_temp_dirs", "list_parent_dir", "read_secret", "write_victim_dir",
    "read_victim_cwd_via_proc", "read_victim_environ", "signal_victim", "ptrace_victim",
    "connect_victim_agent", "signal_harness", "ptrace_harness", "read_harness_cmdline",
    "read_run_dir", "write_code",
)


@pytest.fixture
def outside_dir():
    """A folder outside the hidden defaults (/tmp, home): a run directory and a code file."""
    directory = Path(tempfile.mkdtemp(prefix=".isolation-", dir=Path(__file__).parent))
    (directory / "run").mkdir()
    (directory / "run" / "rollouts.jsonl").write_text('{"session_id": "someone else"}\n')
    (directory / "code.py").write_text("VALUE = 1\n")
    yield directory
    shutil.rmtree(directory)


async def _start_victim(runtime, session_id, *, wait_s, timeout_s):
    """A victim session that wrote its secret and waits: (its task, its live sandbox)."""
    session = asyncio.create_task(runtime.run_session(
        agent=HOSTILE, session_id=session_id, payload={"role": "victim", "wait_s": wait_s},
        timeout_s=timeout_s))
    await _wait_for(lambda: bool(runtime._sessions) and all(
        (s.workdir / "SECRET_FROM_A").exists() for s in runtime._sessions.values()))
    return session, runtime.sandbox(session_id)


async def _wait_for(predicate, timeout_s=20.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_a_hostile_session_cannot_reach_a_live_victim_or_the_harness(outside_dir):
    run_dir = outside_dir / "run"
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=2, startup_timeout_s=30), isolation=IsolationChoice(kind="bwrap", hidden=(run_dir,)))
    assert isinstance(runtime.isolation, Bubblewrap) and runtime.start_method == "spawn"
    try:
        victim = asyncio.create_task(runtime.run_session(
            agent=HOSTILE, session_id="victim-" + "a" * 40, payload={"role": "victim", "wait_s": 60},
            timeout_s=90))
        sandboxes = runtime._sessions  # the test peeks at where the victim lives, to aim the attack
        await _wait_for(lambda: any((s.workdir / "SECRET_FROM_A").exists() for s in sandboxes.values()))
        victim_sandbox = runtime.sandbox("victim-" + "a" * 40)
        attack = await runtime.run_session(
            agent=HOSTILE, session_id="attacker-" + "b" * 40, timeout_s=60,
            payload={"role": "attacker", "harness_pid": os.getpid(), "run_dir": str(run_dir),
                     "code_file": str(outside_dir / "code.py"),
                     "victim": {"workdir": victim_sandbox.workdir, "host_pid": victim_sandbox.host_pid}},
        )
        assert attack.status.value == "completed", attack.error
        report = attack.result
        succeeded = {name: report[name] for name in ATTACKS if report[name]["ok"]}
        assert not succeeded, f"attacks that got through: {succeeded}"
        assert report["see_processes"]["value"] == [1, 2]  # bwrap's init and the agent itself
        assert not victim.done()  # the victim lived through it, secret intact
        assert (Path(victim_sandbox.workdir) / "SECRET_FROM_A").read_text() == "the victim's secret"
        assert not (Path(victim_sandbox.workdir) / "planted").exists()
        assert (outside_dir / "code.py").read_text() == "VALUE = 1\n"
    finally:
        await runtime.aclose()
    outcome = await victim
    assert outcome.status.value != "completed"  # killed by aclose, not finished


@pytest.mark.asyncio
async def test_the_session_sees_its_own_dir_writable_and_private_temp(tmp_path):
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    try:
        session, sandbox = await _start_victim(runtime, "v" * 40, wait_s=30, timeout_s=60)
        who = await sandbox.exec(["sh", "-c", "id -u; ls /tmp; touch /tmp/x && echo tmp-ok; "
                                  "touch /usr/planted 2>&1 || echo ro-ok; ls"])
        lines = who.stdout.split()
        assert who.exit_code == 0 and lines[0] == "1000"
        assert "tmp-ok" in lines and "ro-ok" in lines and "SECRET_FROM_A" in lines
        sessions_seen = [name for name in lines if name.startswith("arl-")]
        assert sessions_seen == [Path(sandbox.workdir).name]  # its own directory, no other
        assert not Path("/usr/planted").exists()
        session.cancel()
    finally:
        await runtime.aclose()


@pytest.mark.asyncio
async def test_limits_bound_a_session_process():
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30), isolation=IsolationChoice(
        kind="bwrap", limits=SandboxLimits(memory_mb=2048, file_size_mb=1)))
    try:
        session, sandbox = await _start_victim(runtime, "w" * 40, wait_s=30, timeout_s=60)
        big = await sandbox.exec(["sh", "-c", "head -c 3000000 /dev/zero > big; echo $?; wc -c < big"])
        code, size = big.stdout.split()
        assert code != "0" and int(size) == 1024 * 1024  # RLIMIT_FSIZE: 1 MiB, then EFBIG
        memory = await sandbox.exec(["sh", "-c", "ulimit -v"])
        assert memory.stdout.strip() == str(2048 * 1024)
        session.cancel()
    finally:
        await runtime.aclose()


def _run_as_session(isolation, workdir: Path, script: str) -> subprocess.CompletedProcess:
    plan = isolation.launch(["sh", "-c", script], workdir=workdir)
    return subprocess.run(plan.argv, cwd=workdir, capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"]}, **plan.popen_kwargs())


_SESSION_REPORT = ('exec python3 -c "import os, resource; print(os.getsid(0) == os.getpid(), '
                   '[resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, '
                   'resource.RLIMIT_NOFILE)])"')


@pytest.mark.parametrize("with_prlimit", [True, False], ids=["prlimit-vfork", "preexec-fallback"])
def test_session_commands_get_their_own_session_and_limits_either_way(tmp_path, monkeypatch, with_prlimit):
    """The plan needs no Python between fork and exec when util-linux's prlimit is there (so the
    harness spawns with vfork, not a page-table copy); without it, the preexec does the same."""
    from agentcore_rl_harness.runtimes import isolation as module

    if with_prlimit and module._prlimit() is None:
        pytest.fail("util-linux's prlimit is missing on this machine (apt-get install util-linux)")
    if not with_prlimit:
        monkeypatch.setattr(module, "_prlimit", lambda: None)
    limits = SandboxLimits(memory_mb=3000, file_size_mb=5, open_files=77, processes=None)
    isolation = NoIsolation(limits)
    for plan in (isolation.launch(["sh", "-c", _SESSION_REPORT], workdir=tmp_path),
                 isolation.enter(["sh", "-c", _SESSION_REPORT], host_pid=os.getpid(), cwd=str(tmp_path))):
        assert (plan.preexec is None) == with_prlimit
        assert plan.new_session == with_prlimit
        done = subprocess.run(plan.argv, cwd=tmp_path, capture_output=True, text=True, timeout=30,
                              **plan.popen_kwargs())
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[0] == f"True [{3000 * 2**20}, {5 * 2**20}, 77]"


def test_no_limits_still_start_a_new_session(tmp_path):
    plan = NoIsolation(SandboxLimits(memory_mb=None, file_size_mb=None, open_files=None,
                                     processes=None)).launch(["sh", "-c", _SESSION_REPORT], workdir=tmp_path)
    assert plan.argv[0] == "sh" and plan.preexec is None and plan.new_session
    done = subprocess.run(plan.argv, cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          **plan.popen_kwargs())
    assert done.stdout.startswith("True ["), done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation switches uids: root only")
def test_uid_fallback_walls_off_files_signals_and_ptrace(tmp_path):
    isolation = SessionUid(SandboxLimits())
    victim_dir, attacker_dir = tmp_path / "a", tmp_path / "b"
    victim_dir.mkdir()
    attacker_dir.mkdir()
    (victim_dir / "SECRET_FROM_A").write_text("secret")
    isolation.prepare(victim_dir)
    isolation.prepare(attacker_dir)
    assert isolation.uid_of(victim_dir) != isolation.uid_of(attacker_dir)
    plan = isolation.launch(["sleep", "30"], workdir=victim_dir)
    victim = subprocess.Popen(plan.argv, cwd=victim_dir, **plan.popen_kwargs())
    try:
        script = (
            f"cat {victim_dir}/SECRET_FROM_A && echo READ; "
            f"touch {victim_dir}/planted && echo WROTE; "
            f"ls /proc/{victim.pid}/cwd/ && echo CWD; "
            f"kill -9 {victim.pid} && echo KILLED; "
            f"kill -0 {os.getpid()} && echo SIGNALLED_HARNESS; "
            f"echo planted >> {Path(__file__)} && echo WROTE_CODE; "
            "id -u"
        )
        attack = _run_as_session(isolation, attacker_dir, script)
        for marker in ("READ", "WROTE", "CWD", "KILLED", "SIGNALLED_HARNESS", "WROTE_CODE"):
            assert marker not in attack.stdout.split(), attack.stdout + attack.stderr
        assert attack.stdout.split()[-1] == str(isolation.uid_of(attacker_dir))
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_auto_is_the_strongest_available_and_none_warns(caplog, monkeypatch):
    assert isinstance(build_isolation(IsolationChoice()), Bubblewrap)  # bwrap works on this machine
    with caplog.at_level(logging.WARNING):
        assert isinstance(build_isolation(IsolationChoice(kind="none")), NoIsolation)
    assert "can read each other's files" in caplog.text
    monkeypatch.setattr(shutil, "which", lambda name: None)  # a machine without bubblewrap
    with pytest.raises(ConfigError, match="apt-get install bubblewrap"):
        build_isolation(IsolationChoice(kind="bwrap"))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        fallback = build_isolation(IsolationChoice())
    assert isinstance(fallback, SessionUid if os.geteuid() == 0 else NoIsolation)
    assert "not installed" in caplog.text
    with pytest.raises(ConfigError, match="runtime.isolation must be one of"):
        build_isolation(IsolationChoice(kind="chroot"))
    with pytest.raises(ConfigError, match="runtime.limits.memory_mb"):
        build_isolation(IsolationChoice(limits=SandboxLimits(memory_mb=0)))


def test_fork_cannot_be_combined_with_isolation():
    with pytest.raises(ConfigError, match="start_method=fork cannot isolate sessions"):
        LocalRuntime(LocalRuntimeConfig(start_method="fork", isolation="bwrap"))
    with pytest.raises(ConfigError, match="start_method=fork cannot isolate sessions"):
        LocalRuntime(LocalRuntimeConfig(start_method="fork", isolation="uid"))


@pytest.mark.asyncio
async def test_no_sandbox_outside_a_live_session():
    runtime = LocalRuntime(LocalRuntimeConfig(isolation="bwrap"))
    try:
        with pytest.raises(SandboxError, match="no live local session"):
            runtime.sandbox("nobody")
    finally:
        await runtime.aclose()


def _living(pids: set[int]) -> list[int]:
    def state(pid: int) -> str:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return "gone"
        return next(line for line in status.splitlines() if line.startswith("State:"))
    return [pid for pid in pids if state(pid) not in ("gone",) and "zombie" not in state(pid)]


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


@pytest.mark.asyncio
async def test_a_timed_out_session_leaves_no_process_behind():
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    try:
        session, sandbox = await _start_victim(runtime, "t" * 40, wait_s=120, timeout_s=4)
        background = await sandbox.exec(["sh", "-c", "sleep 300 & sleep 300"], background=True)
        await asyncio.sleep(0.3)
        launched = next(iter(runtime._live)).pid
        pids = {launched, *_descendants(launched), background.pid, *_descendants(background.pid)}
        assert len(pids) >= 5  # bwrap, its init, the agent, nsenter's shell and its sleeps
        outcome = await session
        assert outcome.status.value == "timeout"
        assert not background.running
        await _wait_for(lambda: not _living(pids), timeout_s=5)  # SIGKILL lands asynchronously
        with pytest.raises(SandboxError, match="no live local session"):
            runtime.sandbox("t" * 40)
    finally:
        await runtime.aclose()


def test_a_hidden_dir_inside_a_rebound_one_stays_hidden(tmp_path):
    """A project checked out under /tmp is bound back (its code is readable) but its run
    directory, inside it, must stay hidden."""
    project = tmp_path / "project"
    (project / "outputs" / "run").mkdir(parents=True)
    (project / "outputs" / "run" / "rollouts.jsonl").write_text("other sessions' results\n")
    (project / "agent.py").write_text("print('code')\n")
    workdir = tmp_path / "session"
    workdir.mkdir()
    isolation = build_isolation(IsolationChoice(kind="bwrap", hidden=(project / "outputs" / "run",),
                                                readable=(project,)))
    probe = _run_as_session(isolation, workdir, f"cat {project}/agent.py; "
                            f"cat {project}/outputs/run/rollouts.jsonl || echo HIDDEN")
    assert probe.stdout.splitlines() == ["print('code')", "HIDDEN"], probe.stdout + probe.stderr


# A stand-in for bwrap that runs the real one, but while its flag file exists makes it fail in its
# own set-up first (a bind source that is gone: what the race with another session's tmpfs, which
# vanishes between `--ro-bind / /` and its read-only remount, gives), counting the launches.
FLAKY_BWRAP = """#!/bin/sh
[ "$1" = "--help" ] && exec "{bwrap}" "$@"
echo launch >> "{folder}/launches"
if [ -e "{folder}/fail" ]; then
  [ -e "{folder}/fail-always" ] || rm -f "{folder}/fail"
  exec "{bwrap}" --ro-bind "{folder}/gone" /mnt "$@"
fi
exec "{bwrap}" "$@"
"""


async def _under_flaky_bwrap(folder, agent, *flags):
    """One session whose bubblewrap is FLAKY_BWRAP with `flags` set: (its outcome, launches)."""
    folder.mkdir(exist_ok=True)
    for flag in flags:
        (folder / flag).touch()
    script = folder / "bwrap"
    script.write_text(FLAKY_BWRAP.format(bwrap=shutil.which("bwrap"), folder=folder))
    script.chmod(0o755)
    isolation = build_isolation(IsolationChoice(kind="bwrap"))
    isolation.bwrap = str(script)
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30), isolation=isolation)
    try:
        outcome = await runtime.run_session(agent=AgentRef(task="t", agent=str(AGENTS / agent)),
                                            session_id="r" * 40, payload={"x": 1}, timeout_s=60)
    finally:
        await runtime.aclose()
    return outcome, (folder / "launches").read_text().split().count("launch")


@pytest.mark.asyncio
async def test_a_session_whose_bubblewrap_set_up_failed_is_launched_again(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        outcome, launches = await _under_flaky_bwrap(tmp_path / "once", "echo_agent.py", "fail")
    assert outcome.status.value == "completed", outcome.error
    assert launches == 2 and outcome.result["echo"] == {"x": 1}  # bubblewrap failed once, then ran
    assert "bubblewrap failed to set up the sandbox (launch 1 of 3)" in caplog.text
    assert "Can't find source path" in caplog.text
    # a set-up that keeps failing ends the session after 3 launches, with bubblewrap's own words
    outcome, launches = await _under_flaky_bwrap(tmp_path / "always", "echo_agent.py", "fail", "fail-always")
    assert outcome.status.value == "agent_error" and launches == 3
    assert "exited before it was ready" in outcome.error and "Can't find source path" in outcome.error
    # an agent that dies before it is ready is its own failure: launched once
    dying = tmp_path / "dying_agent.py"
    dying.write_text("import os, sys\nprint('dying at import', file=sys.stderr, flush=True)\nos._exit(5)\n")
    outcome, launches = await _under_flaky_bwrap(tmp_path / "agent", str(dying))
    assert outcome.status.value == "agent_error" and launches == 1, outcome.error
    assert "exited before it was ready" in outcome.error and "dying at import" in outcome.error
