"""The `fork` start method: sessions forked from one zygote per agent, still isolated per session."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acr_stub import alive
from acr_stub import agent_ref as agent
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.isolation import IsolationChoice
from agentcore_rl_harness.runtimes.local import LocalRuntime


pytestmark = pytest.mark.asyncio




async def wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return not alive(pid)


async def run(rt: LocalRuntime, name: str, session_id: str = "s", **payload):
    return await rt.run_session(
        agent=agent(name), session_id=session_id, payload=payload, timeout_s=20
    )


async def test_sequential_sessions_reuse_one_zygote_with_their_own_cwd_and_home():
    rt = LocalRuntime(LocalRuntimeConfig(start_method="fork"), kill_grace_s=0.5)
    try:
        outcomes = [await run(rt, "echo_agent.py", f"s{i}") for i in range(4)]
    finally:
        await rt.aclose()

    assert all(o.status is Status.COMPLETED for o in outcomes), [o.error for o in outcomes]
    results = [o.result for o in outcomes]
    zygotes = {r["ppid"] for r in results}
    assert len(zygotes) == 1, "every session must be forked from the same zygote"
    (zygote,) = zygotes
    assert zygote != os.getpid()
    assert len({r["pid"] for r in results}) == 4
    assert [r["session_id"] for r in results] == ["s0", "s1", "s2", "s3"]
    assert len({r["cwd"] for r in results}) == 4
    assert all(r["home"] == r["cwd"] and not Path(r["cwd"]).exists() for r in results)
    assert await wait_dead(zygote), "aclose() must stop the zygote"


@pytest.mark.parametrize("start_method, imports", [("fork", 1), ("spawn", 3)])
async def test_sessions_draw_different_random_numbers(tmp_path, monkeypatch, start_method, imports):
    """Import-time side effects run once per zygote under fork, and RNGs are re-seeded per fork."""
    import_log = tmp_path / "imports.log"
    monkeypatch.setenv("ARL_TEST_IMPORT_LOG", str(import_log))
    rt = LocalRuntime(LocalRuntimeConfig(env_passthrough=("ARL_TEST_IMPORT_LOG",), start_method=start_method), kill_grace_s=0.5, isolation=IsolationChoice(writable=(tmp_path,)))
    try:
        outcomes = [await run(rt, "random_agent.py") for _ in range(3)]
    finally:
        await rt.aclose()

    assert all(o.status is Status.COMPLETED for o in outcomes), [o.error for o in outcomes]
    results = [o.result for o in outcomes]
    assert len({r["random"] for r in results}) == 3
    assert len({r["numpy"] for r in results}) == 3
    assert len(import_log.read_text().splitlines()) == imports
    at_import = {r["at_import"] for r in results}
    assert len(at_import) == (1 if start_method == "fork" else 3)


async def test_import_failure_fails_every_session_of_the_run_once_and_a_new_run_retries(tmp_path, monkeypatch):
    """An agent that cannot be imported is loaded by one session; the others end at once naming
    that failure (issue 32: fail the task once, fast, not once per row x sample), also after the
    cause is gone. A new runtime (the next run) loads it afresh."""
    marker = tmp_path / "broken"
    marker.touch()
    monkeypatch.setenv("ARL_TEST_BROKEN_MARKER", str(marker))
    config = LocalRuntimeConfig(env_passthrough=("ARL_TEST_BROKEN_MARKER",), start_method="fork")
    rt = LocalRuntime(config, kill_grace_s=0.5)
    try:
        failed = await asyncio.gather(*(run(rt, "flaky_import_agent.py") for _ in range(2)))
        marker.unlink()
        later = await run(rt, "flaky_import_agent.py")
    finally:
        await rt.aclose()
    rt = LocalRuntime(config, kill_grace_s=0.5)
    try:
        next_run = await run(rt, "flaky_import_agent.py")
    finally:
        await rt.aclose()

    cause = "cannot load the agent: RuntimeError: the agent's config service is down"
    for outcome in (*failed, later):
        assert outcome.status is Status.AGENT_ERROR
        assert cause in outcome.error
    loaded, *waited = sorted(failed, key=lambda outcome: "Traceback" not in outcome.error)
    assert "Traceback" in loaded.error, "the zygote's stderr tail is part of the first error"
    for outcome in (*waited, later):
        assert "failed to load in an earlier session of this run" in outcome.error
    assert next_run.status is Status.COMPLETED, next_run.error
    assert next_run.result == {"ok": True}


async def test_a_dead_zygote_is_replaced_by_the_next_session():
    rt = LocalRuntime(LocalRuntimeConfig(start_method="fork"), kill_grace_s=0.5)
    try:
        first = await run(rt, "echo_agent.py")
        os.kill(first.result["ppid"], signal.SIGKILL)
        assert await wait_dead(first.result["ppid"])
        second = await run(rt, "echo_agent.py")
    finally:
        await rt.aclose()

    assert second.status is Status.COMPLETED, second.error
    assert second.result["ppid"] != first.result["ppid"]


async def test_aclose_stops_a_zygote_that_is_still_importing(tmp_path):
    slow = tmp_path / "slow_import.py"
    pid_file = tmp_path / "zygote.pid"
    slow.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                    "time.sleep(60)\n")
    rt = LocalRuntime(LocalRuntimeConfig(start_method="fork"), kill_grace_s=0.5)
    session = asyncio.create_task(
        rt.run_session(agent=AgentRef("t", str(slow)), session_id="s", payload={}, timeout_s=30)
    )
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    zygote = int(pid_file.read_text())
    await rt.aclose()
    outcome = await asyncio.wait_for(session, 5)
    assert outcome.status is Status.AGENT_ERROR
    assert "closed" in outcome.error
    assert await wait_dead(zygote)


async def test_zygote_runs_as_a_module(tmp_path):
    """`python -m agentcore_rl_harness.runtimes._zygote` reports a missing agent like the server."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentcore_rl_harness.runtimes._zygote",
         "--agent", str(tmp_path / "missing.py"), "--socket", str(tmp_path / "fork.sock"),
         "--parent-pid", str(os.getpid())],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 3
    assert json.loads(proc.stdout) == {"error": f"agent file not found: {tmp_path / 'missing.py'}"}
