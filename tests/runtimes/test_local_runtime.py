"""The `local` runtime runs real BedrockAgentCoreApp agents, one process per session.

Isolation and failure handling are tested under both start methods (`fork`: forked from a
per-agent zygote; `spawn`: a fresh interpreter per session); result parsing, which does not
depend on how the process started, under the default only. `test_zygote.py` covers what is
specific to `fork`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
import pytest_asyncio

from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.errors import ConfigError, RuntimeStartError
from acr_stub import AGENTS, alive
from acr_stub import agent_ref as agent
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef, AgentRuntime
from agentcore_rl_harness.runtimes.local import LocalRuntime


pytestmark = pytest.mark.asyncio




async def wait_for_file(path: Path, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return json.loads(path.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout_s}s")


both_start_methods = pytest.mark.parametrize("start_method", ["fork", "spawn"])


@pytest.fixture
def start_method() -> str:
    return "fork"


@pytest_asyncio.fixture
async def runtime(start_method):
    # isolation none: these tests read the agent's own pids, which a PID namespace renumbers
    # (test_isolation.py covers the same kills under bubblewrap)
    rt = LocalRuntime(LocalRuntimeConfig(concurrency=4, startup_timeout_s=20, start_method=start_method, isolation="none"), kill_grace_s=0.5)
    yield rt
    await rt.aclose()


async def test_isolated_sessions_spawn_by_default_and_fork_means_no_isolation(caplog):
    assert LocalRuntime(LocalRuntimeConfig()).start_method == "spawn"
    assert LocalRuntime(LocalRuntimeConfig(isolation="none")).start_method == "fork"
    with caplog.at_level("WARNING"):
        forked = LocalRuntime(LocalRuntimeConfig(start_method="fork"))
    assert forked.isolation.name == "none" and "NOT isolated" in caplog.text


async def test_unknown_start_method_is_refused():
    with pytest.raises(ConfigError, match="runtime.start_method='forkserver' is not supported; valid choices"):
        LocalRuntime(LocalRuntimeConfig(start_method="forkserver"))


async def test_is_an_agent_runtime(runtime):
    assert isinstance(runtime, AgentRuntime)


@both_start_methods
async def test_echo_agent_answers_in_an_isolated_process(start_method, monkeypatch):
    monkeypatch.setenv("ARL_TEST_SECRET", "s3cret")
    monkeypatch.setenv("ARL_TEST_PASSED", "yes")
    rt = LocalRuntime(LocalRuntimeConfig(env_passthrough=("ARL_TEST_PASSED",), start_method=start_method), kill_grace_s=0.5)
    try:
        outcome = await rt.run_session(
            agent=agent("echo_agent.py"),
            session_id="session-0123456789abcdef0123456789abcdef",
            payload={"prompt": "hi", "_rollout": {"api_key": "k"}},
            timeout_s=20,
        )
    finally:
        await rt.aclose()

    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.error is None and outcome.elapsed_s > 0
    result = outcome.result
    assert result["echo"] == {"prompt": "hi", "_rollout": {"api_key": "k"}}
    assert result["session_id"] == "session-0123456789abcdef0123456789abcdef"
    assert result["home"] == result["cwd"]
    assert Path(result["cwd"]).name.startswith(f"arl-{os.getpid()}-")
    assert not Path(result["cwd"]).exists(), "the session directory must be removed"
    assert "ARL_TEST_SECRET" not in result["env"]
    assert "ARL_TEST_PASSED" in result["env"]
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONPATH"}
    assert set(result["env"]) <= allowed | {"HF_HUB_OFFLINE", "ARL_TEST_PASSED", "PWD"}
    if start_method == "spawn":  # bubblewrap: its own PID namespace (the agent under bwrap's init)
        assert (result["pid"], result["ppid"]) == (2, 1)
    else:
        assert not alive(result["pid"])


@both_start_methods
async def test_base_dir_holds_session_directories(start_method):
    # a short base: the agent's unix socket lives in the session dir (107-byte path limit), and
    # pytest's tmp_path under xdist is long
    base = Path(tempfile.mkdtemp(prefix="arl-t-"))
    rt = LocalRuntime(LocalRuntimeConfig(start_method=start_method), base_dir=base / "sessions", kill_grace_s=0.5)
    outcome = await rt.run_session(
        agent=agent("echo_agent.py"), session_id="s", payload={}, timeout_s=20
    )
    await rt.aclose()
    assert Path(outcome.result["cwd"]).parent == base / "sessions"
    assert list((base / "sessions").iterdir()) == []
    (base / "sessions").rmdir()
    base.rmdir()


async def test_streaming_agent_result_is_the_last_event(runtime):
    outcome = await runtime.run_session(
        agent=agent("stream_agent.py"), session_id="s", payload={"x": 21}, timeout_s=20
    )
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"answer": 42}


async def test_non_dict_result_is_wrapped(runtime):
    outcome = await runtime.run_session(
        agent=agent("scalar_agent.py"), session_id="s", payload={"x": 1}, timeout_s=20
    )
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"output": 2}


async def test_an_agent_that_returns_none_is_an_agent_error_naming_the_fix(runtime, tmp_path):
    forgetful = tmp_path / "forgetful_agent.py"
    forgetful.write_text("from bedrock_agentcore import BedrockAgentCoreApp\napp = BedrockAgentCoreApp()\n\n"
                         "@app.entrypoint\ndef invoke(payload):\n    print('the answer is 42')\n")
    outcome = await runtime.run_session(
        agent=AgentRef("t", str(forgetful)), session_id="s", payload={}, timeout_s=20
    )
    assert outcome.status is Status.AGENT_ERROR, outcome  # not {"output": None}, a wrong answer
    assert "the agent returned nothing (None / JSON null)" in outcome.error
    assert 'return {"answer": answer}' in outcome.error


async def test_raising_agent_is_an_agent_error_with_its_message(runtime):
    outcome = await runtime.run_session(
        agent=agent("raising_agent.py"), session_id="s", payload={}, timeout_s=20
    )
    assert outcome.status is Status.AGENT_ERROR
    assert outcome.result is None
    assert "HTTP 500" in outcome.error
    assert "no such city 'Atlantis'" in outcome.error


async def test_agent_raising_mid_stream_is_an_agent_error(runtime):
    outcome = await runtime.run_session(
        agent=agent("raising_agent.py"), session_id="s", payload={"while_streaming": True},
        timeout_s=20,
    )
    assert outcome.status is Status.AGENT_ERROR
    assert "RuntimeError: stream broke" in outcome.error


@both_start_methods
async def test_agent_process_exiting_mid_request_reports_exit_code_and_stderr(runtime):
    outcome = await runtime.run_session(
        agent=agent("exiting_agent.py"), session_id="s", payload={}, timeout_s=20
    )
    assert outcome.status is Status.AGENT_ERROR
    assert "exit code 7" in outcome.error
    assert "about to crash" in outcome.error


@both_start_methods
async def test_chatty_agent_does_not_block_on_stdout(runtime):
    outcome = await runtime.run_session(
        agent=agent("chatty_agent.py"), session_id="s", payload={}, timeout_s=20
    )
    assert outcome.status is Status.COMPLETED, outcome.error


@both_start_methods
async def test_hanging_agent_times_out_and_its_process_group_is_killed(runtime, tmp_path):
    pid_file = tmp_path / "pids.json"
    started = time.monotonic()
    outcome = await runtime.run_session(
        agent=agent("hanging_agent.py"), session_id="s-hang", payload={"pid_file": str(pid_file)},
        timeout_s=6,  # the agent's start counts: on a loaded machine it needs seconds
    )
    wall = time.monotonic() - started
    assert outcome.status is Status.TIMEOUT
    assert "6s" in outcome.error and "s-hang" in outcome.error
    assert wall < 6 + runtime.kill_grace_s + 1.5
    pids = json.loads(pid_file.read_text())
    await asyncio.sleep(0.2)  # let init reap the orphaned grandchild
    assert not alive(pids["pid"]), "the agent process survived"
    assert not alive(pids["grandchild"]), "a process the agent spawned survived"
    assert runtime.live_sessions == 0


@both_start_methods
async def test_slow_startup_is_a_timeout(tmp_path, start_method):
    slow = tmp_path / "slow_import.py"
    slow.write_text("import time\ntime.sleep(30)\n")
    rt = LocalRuntime(LocalRuntimeConfig(startup_timeout_s=0.5, start_method=start_method), kill_grace_s=0.5)
    outcome = await rt.run_session(
        agent=AgentRef("t", str(slow)), session_id="s", payload={}, timeout_s=20
    )
    await rt.aclose()
    assert outcome.status is Status.TIMEOUT
    assert "startup_timeout_s=0.5s" in outcome.error


@both_start_methods
@pytest.mark.parametrize(
    "source, expected",
    [
        ("from bedrock_agentcore import BedrockAgentCoreApp\napp = BedrockAgentCoreApp(\n",
         "SyntaxError"),
        ("import no_such_module_for_arl_tests\n", "No module named 'no_such_module_for_arl_tests'"),
        ("x = 1\n", "no BedrockAgentCoreApp instance found"),
    ],
    ids=["syntax-error", "import-error", "no-app"],
)
async def test_unloadable_agent_is_an_agent_error(runtime, tmp_path, source, expected):
    broken = tmp_path / "broken_agent.py"
    broken.write_text(source)
    outcome = await runtime.run_session(
        agent=AgentRef("t", str(broken)), session_id="s", payload={}, timeout_s=20
    )
    assert outcome.status is Status.AGENT_ERROR
    assert expected in outcome.error


async def test_missing_agent_file_is_an_agent_error(runtime, tmp_path):
    outcome = await runtime.run_session(
        agent=AgentRef("t", str(tmp_path / "nope.py")), session_id="s", payload={}, timeout_s=5
    )
    assert outcome.status is Status.AGENT_ERROR
    assert "agent file not found" in outcome.error and "nope.py" in outcome.error


async def test_several_apps_need_a_name(runtime):
    ambiguous = await runtime.run_session(
        agent=agent("two_apps_agent.py"), session_id="s", payload={}, timeout_s=20
    )
    named = await runtime.run_session(
        agent=agent("two_apps_agent.py:second"), session_id="s", payload={}, timeout_s=20
    )
    assert ambiguous.status is Status.AGENT_ERROR
    assert "first, second" in ambiguous.error
    assert named.result == {"which": "second"}


async def test_module_colon_app_form_imports_from_the_working_directory(
    runtime, tmp_path, monkeypatch
):
    (tmp_path / "my_arl_agent_module.py").write_text(
        (AGENTS / "scalar_agent.py").read_text()
    )
    monkeypatch.chdir(tmp_path)
    outcome = await runtime.run_session(
        agent=AgentRef("t", "my_arl_agent_module:app"), session_id="s", payload={"x": 4},
        timeout_s=20,
    )
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result == {"output": 5}


@both_start_methods
async def test_concurrency_bounds_live_sessions(start_method):
    rt = LocalRuntime(LocalRuntimeConfig(concurrency=2, start_method=start_method), kill_grace_s=0.5)
    outcomes = await asyncio.gather(
        *(
            rt.run_session(
                agent=agent("slow_agent.py"), session_id=f"s{i}", payload={"sleep_s": 3.0},
                timeout_s=30,
            )
            for i in range(4)
        )
    )
    await rt.aclose()
    assert all(o.status is Status.COMPLETED for o in outcomes), [o.error for o in outcomes]
    intervals = [(o.result["start"], o.result["end"]) for o in outcomes]
    max_live = max(sum(s <= t < e for s, e in intervals) for t, _ in intervals)
    assert max_live == 2


@both_start_methods
async def test_cancelling_a_session_kills_its_process(runtime, tmp_path):
    pid_file = tmp_path / "pids.json"
    task = asyncio.create_task(
        runtime.run_session(
            agent=agent("hanging_agent.py"), session_id="s", payload={"pid_file": str(pid_file)},
            timeout_s=60,
        )
    )
    pids = await wait_for_file(pid_file)
    assert alive(pids["pid"])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert not alive(pids["pid"])
    assert not alive(pids["grandchild"])
    assert runtime.live_sessions == 0


@both_start_methods
async def test_aclose_kills_live_sessions_and_refuses_new_ones(tmp_path, start_method):
    rt = LocalRuntime(LocalRuntimeConfig(start_method=start_method, isolation="none"), kill_grace_s=0.5)
    pid_file = tmp_path / "pids.json"
    task = asyncio.create_task(
        rt.run_session(
            agent=agent("hanging_agent.py"), session_id="s", payload={"pid_file": str(pid_file)},
            timeout_s=60,
        )
    )
    pids = await wait_for_file(pid_file)
    await rt.aclose()
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.status is Status.AGENT_ERROR
    assert not alive(pids["pid"])
    with pytest.raises(RuntimeStartError, match="closed"):
        await rt.run_session(agent=agent("echo_agent.py"), session_id="s", payload={}, timeout_s=5)


@both_start_methods
async def test_unusable_python_is_an_infrastructure_error(tmp_path, start_method):
    rt = LocalRuntime(LocalRuntimeConfig(start_method=start_method), python=str(tmp_path / "no-python"), base_dir=tmp_path / "sessions")
    with pytest.raises(RuntimeStartError, match="no-python"):
        await rt.run_session(agent=agent("echo_agent.py"), session_id="s", payload={}, timeout_s=5)
    assert list((tmp_path / "sessions").iterdir()) == []


async def test_child_server_runs_as_a_module(tmp_path):
    """`python -m agentcore_rl_harness.runtimes._agent_server` is the documented entry point."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "agentcore_rl_harness.runtimes._agent_server",
         "--agent", str(tmp_path / "missing.py")],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )
    assert proc.returncode == 3
    assert json.loads(proc.stdout) == {"error": f"agent file not found: {tmp_path / 'missing.py'}"}


@both_start_methods
@pytest.mark.filterwarnings("ignore:The test .* is marked with '@pytest.mark.asyncio'")
def test_agent_processes_die_with_a_killed_harness(tmp_path, start_method):
    """SIGKILL the harness process mid-session: its agent processes (and zygote) go away."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    pid_file = tmp_path / "pid"
    agent = tmp_path / "sleepy.py"
    agent.write_text(textwrap.dedent(f"""
        import os
        import time
        from bedrock_agentcore import BedrockAgentCoreApp
        app = BedrockAgentCoreApp()

        @app.entrypoint
        def invoke(payload):
            with open({str(pid_file)!r}, "w") as pid_file:
                pid_file.write(str(os.getpid()))
            time.sleep(600)
    """))
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import asyncio
        from agentcore_rl_harness.runtimes.base import AgentRef
        from agentcore_rl_harness.runtimes.isolation import IsolationChoice
        from agentcore_rl_harness.runtimes.local import LocalRuntime
        from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig

        async def main():
            runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, start_method={start_method!r}),
                                   isolation=IsolationChoice(writable=({str(tmp_path)!r},)))
            await runtime.run_session(agent=AgentRef(task="t", agent={str(agent)!r}),
                                      session_id="s" * 40, payload={{}}, timeout_s=600)

        asyncio.run(main())
    """))
    harness = subprocess.Popen([sys.executable, str(driver)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (pid_file.exists() and pid_file.read_text()):
            time.sleep(0.1)
        assert pid_file.exists(), "the agent never reached its handler"
        out = subprocess.run(["pgrep", "-f", str(agent)], capture_output=True, text=True)
        # fork: the zygote and its forked child; spawn (bubblewrap): bwrap, its init, the agent
        expected = 2 if start_method == "fork" else 3
        assert len(out.stdout.split()) == expected, out.stdout
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = subprocess.run(["pgrep", "-f", str(agent)], capture_output=True, text=True)
        if not alive.stdout.strip():
            break
        time.sleep(0.2)
    assert not alive.stdout.strip(), f"agent processes outlived the harness: {alive.stdout}"
