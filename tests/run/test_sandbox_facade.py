"""`arl.Sandbox`: the same calls async and sync, over the agent's own process (`here`) and over a
live local session under real bubblewrap."""

from __future__ import annotations

import asyncio
import os

import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.local import LocalRuntime

AGENT = AgentRef(task="sandbox", agent=os.path.join(os.path.dirname(__file__), "..", "runtimes",
                                                     "agents", "hostile_agent.py"))


def test_here_runs_in_the_callers_directory_sync(tmp_path):
    sandbox = arl.Sandbox.here(workdir=str(tmp_path))
    sandbox.sync.put_file("notes/a.txt", "hello")
    assert (tmp_path / "notes" / "a.txt").read_text() == "hello"
    result = sandbox.sync.exec(["cat", "notes/a.txt"])
    assert isinstance(result, arl.ExecResult) and result.ok and result.stdout == "hello"
    background = sandbox.sync.exec(["sh", "-c", "sleep 0.2; echo late"], background=True)
    assert background.status() == "running"
    assert background.result(timeout=10).stdout == "late\n"
    assert sandbox.sync.get_file("notes/a.txt") == b"hello"


@pytest.mark.asyncio
async def test_here_async_and_sync_refused_on_its_own_loop(tmp_path):
    """Blocking on the loop that must run the command would deadlock: a clear error instead."""
    sandbox = arl.Sandbox.here(workdir=str(tmp_path))
    result = await sandbox.exec(["pwd"])
    assert result.stdout.strip() == str(tmp_path)
    sync = sandbox.sync
    with pytest.raises(HarnessError, match="await the sandbox's async methods"):
        sync._loop.run(_call_sync_from_loop(sync))


async def _call_sync_from_loop(sync):
    return sync.exec(["true"])


@pytest.mark.asyncio
async def test_a_live_bwrap_session_through_the_facade():
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, startup_timeout_s=30, isolation="bwrap"))
    session = asyncio.create_task(runtime.run_session(
        agent=AGENT, session_id="f" * 40, payload={"role": "victim", "wait_s": 30}, timeout_s=60))
    try:
        while not any((s.workdir / "SECRET_FROM_A").exists() for s in runtime._sessions.values()):
            await asyncio.sleep(0.05)
        sandbox = arl.Sandbox(runtime.sandbox("f" * 40))
        assert sandbox.session_id == "f" * 40
        assert await sandbox.get_file("SECRET_FROM_A") == b"the victim's secret"
        uid = await sandbox.exec(["id", "-u"])
        assert uid.stdout.strip() == "1000"  # the session's user, not the harness's root
    finally:
        session.cancel()
        await runtime.aclose()
