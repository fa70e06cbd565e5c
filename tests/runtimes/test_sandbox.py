"""Shell and files inside a live local session (`runtimes/sandbox.py`), under real bubblewrap and
with no isolation: capped output, timeouts, background handles, files that cannot escape."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import pytest_asyncio

from acr_stub import AGENTS
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.errors import SandboxError
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.local import LocalRuntime
from agentcore_rl_harness.runtimes.sandbox import BackgroundProcess, ExecResult

pytestmark = pytest.mark.asyncio
VICTIM = AgentRef(task="sandbox", agent=str(AGENTS / "hostile_agent.py"))


@contextlib.asynccontextmanager
async def live_sandbox(isolation: str):
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation=isolation))
    session_id = "sandbox-" + "s" * 40
    session = asyncio.create_task(runtime.run_session(
        agent=VICTIM, session_id=session_id, payload={"role": "victim", "wait_s": 60}, timeout_s=90))
    deadline = asyncio.get_running_loop().time() + 20
    while not any((s.workdir / "SECRET_FROM_A").exists() for s in runtime._sessions.values()):
        assert asyncio.get_running_loop().time() < deadline, "the session did not start"
        await asyncio.sleep(0.05)
    try:
        yield runtime.sandbox(session_id)
    finally:
        session.cancel()
        await runtime.aclose()


@pytest_asyncio.fixture(params=["bwrap", "none"])
async def sandbox(request):
    async with live_sandbox(request.param) as sandbox:
        yield sandbox


async def test_exec_runs_in_the_session_dir_with_cwd_env_and_exit_code(sandbox):
    result = await sandbox.exec(["sh", "-c", "pwd; cat SECRET_FROM_A; echo; echo $GREETING; exit 3"],
                                env={"GREETING": "hello"})
    assert isinstance(result, ExecResult)
    assert result.stdout.split("\n")[:3] == [sandbox.workdir, "the victim's secret", "hello"]
    assert result.exit_code == 3 and not result.ok and not result.timed_out
    await sandbox.put_file("sub/dir/note.txt", "x")
    inner = await sandbox.exec(["pwd"], cwd="sub/dir")
    assert inner.stdout.strip() == f"{sandbox.workdir}/sub/dir"


async def test_output_is_capped_and_the_truncation_flagged(sandbox):
    result = await sandbox.exec(["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a; echo err >&2"])
    assert len(result.stdout) == 256 * 1024 and result.stdout_truncated
    assert result.stderr == "err\n" and not result.stderr_truncated
    assert result.exit_code == 0


async def test_a_command_past_its_timeout_is_killed(sandbox):
    result = await sandbox.exec(["sh", "-c", "echo started; sleep 30"], timeout=0.5)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "started\n" and result.elapsed_s < 5


async def test_background_handles_report_status_result_and_kill(sandbox):
    quick = await sandbox.exec(["sh", "-c", "sleep 0.3; echo done"], background=True)
    slow = await sandbox.exec(["sleep", "60"], background=True)
    assert isinstance(quick, BackgroundProcess) and quick.status() == "running"
    finished = await quick.result(timeout=10)
    assert finished.stdout == "done\n" and quick.status() == "exited"
    with pytest.raises(TimeoutError):
        await slow.result(timeout=0.2)
    killed = await slow.kill()
    assert killed.exit_code == -9 and not slow.running


async def test_files_round_trip_and_errors_name_the_path(sandbox):
    data = bytes(range(256)) * 10
    await sandbox.put_file("out/data.bin", data, mode=0o600)
    assert await sandbox.get_file("out/data.bin") == data
    assert (Path(sandbox.workdir) / "out" / "data.bin").read_bytes() == data
    listing = await sandbox.exec(["stat", "-c", "%a", "out/data.bin"])
    assert listing.stdout.strip() == "600"
    with pytest.raises(SandboxError, match="missing.txt"):
        await sandbox.get_file("missing.txt")
    with pytest.raises(SandboxError, match="larger than max_bytes=100"):
        await sandbox.get_file("out/data.bin", max_bytes=100)
    with pytest.raises(SandboxError, match="non-empty argv"):
        await sandbox.exec([])


async def test_a_symlink_the_agent_planted_resolves_inside_its_own_view():
    host_file = Path("/tmp/arl-host-only.txt")
    host_file.write_text("host data")
    try:
        async with live_sandbox("bwrap") as sandbox:
            await sandbox.exec(["ln", "-s", str(host_file), "link"])
            with pytest.raises(SandboxError, match="link"):
                await sandbox.get_file("link")  # the host's /tmp is not the session's /tmp
            with pytest.raises(SandboxError):
                await sandbox.put_file("/usr/planted", "x")  # read-only outside its own dir
    finally:
        host_file.unlink()


async def test_final_state_is_kept_and_restored_as_an_isolated_sandbox():
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    try:
        outcome = await runtime.run_session(
            agent=VICTIM, session_id="state-" + "k" * 40, payload={"role": "victim", "wait_s": 0},
            timeout_s=60, keep_state=True)
        assert outcome.status.value == "completed" and outcome.final_state
        async with runtime.restore(outcome.final_state, session_id="state") as sandbox:
            assert await sandbox.get_file("SECRET_FROM_A") == b"the victim's secret"
            listing = await sandbox.exec(["sh", "-c", "ls -A; id -u; ls /tmp"])
            lines = listing.stdout.split()
            assert "SECRET_FROM_A" in lines and ".agent.sock" not in lines
            assert lines.count(Path(sandbox.workdir).name) == 1  # /tmp holds only its own dir
            workdir = Path(sandbox.workdir)
        assert not workdir.exists()
        no_state = await runtime.run_session(
            agent=VICTIM, session_id="state-" + "n" * 40, payload={"role": "victim", "wait_s": 0},
            timeout_s=60)
        assert no_state.final_state is None
    finally:
        await runtime.aclose()


async def test_a_kept_session_in_a_task_environment_is_restored_there_and_nothing_of_it_stays():
    """A long-lived runtime holds a kept session's environment only until the run core takes what
    was kept: one opened is restored in its environment, one never opened leaves nothing behind."""
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    # A built environment is slow to make (test_rooted.py runs sessions in one): another
    # bubblewrap isolation than the runtime's own stands in for the task's environment here.
    environment = LocalRuntime(LocalRuntimeConfig(isolation="bwrap")).isolation
    runtime._rooted["env.yaml"] = environment
    agent = AgentRef(task="sandbox", agent=VICTIM.agent, environment="env.yaml")
    try:
        sessions = [f"kept-{index}-" + "k" * 40 for index in range(3)]
        kept = [runtime.kept(await runtime.run_session(
            agent=agent, session_id=session_id, payload={"role": "victim", "wait_s": 0}, timeout_s=60,
            keep_state=True), session_id=session_id) for session_id in sessions]
        opened = await kept[0].open()
        assert opened.isolation is environment and await opened.get_file("SECRET_FROM_A")
        for files in kept:  # scored: released, the last two never opened
            await files.aclose()
        assert runtime._kept_isolation == {}
        await runtime.run_session(agent=agent, session_id="never-taken-" + "k" * 40, keep_state=True,
                                  payload={"role": "victim", "wait_s": 0}, timeout_s=60)
    finally:
        await runtime.aclose()
    assert runtime._kept_isolation == {}


async def test_final_state_over_the_bound_is_dropped_with_a_reason():
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    runtime.final_state_max_bytes = 5  # runtime.final_state_mb counts whole MiB
    try:
        outcome = await runtime.run_session(
            agent=VICTIM, session_id="big-" + "k" * 40, payload={"role": "victim", "wait_s": 0},
            timeout_s=60, keep_state=True)
        assert outcome.status.value == "completed"
        assert outcome.final_state is None
        assert "passed 5 bytes" in outcome.final_state_error and "runtime.final_state_mb" in outcome.final_state_error
    finally:
        await runtime.aclose()


@pytest.mark.filterwarnings("ignore::pytest.PytestWarning")
def test_a_hostile_archive_cannot_escape_on_restore(tmp_path):
    import io
    import tarfile

    from agentcore_rl_harness.runtimes._final_state import pack, unpack

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(tarfile.TarError):
        unpack(buffer.getvalue(), target)
    assert not (tmp_path / "escaped.txt").exists()
    (target / "link").symlink_to("/etc/passwd")
    restored = tmp_path / "restored"
    restored.mkdir()
    unpack(pack(target, max_bytes=1024), restored)
    assert (restored / "link").is_symlink() and str((restored / "link").readlink()) == "/etc/passwd"
    sneaky = io.BytesIO()  # a link to / and then a file "through" it: the file is refused
    with tarfile.open(fileobj=sneaky, mode="w:gz") as archive:
        link = tarfile.TarInfo("root")
        link.type, link.linkname = tarfile.SYMTYPE, "/"
        archive.addfile(link)
        through = tarfile.TarInfo("root/tmp/planted-by-archive")
        through.size = 1
        archive.addfile(through, io.BytesIO(b"x"))
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(tarfile.TarError):
        unpack(sneaky.getvalue(), other)
    assert not Path("/tmp/planted-by-archive").exists()
    assert not (other / "root").is_symlink()
