"""A task's MCP servers in local sessions (`mcp_servers.py`, `runtimes/_mcp.py`), called by an
agent through the real `mcp` SDK: an http server started inside the session's bubblewrap sandbox
(its own network namespace and working directory), out of reach of another live session and of
the host, and killed with it; a stdio server started by the agent's own MCP client; a server
that crashes at start, never listens or whose command does not exist failing the session as
`task_error` with what was wrong; and the declaration's mistakes."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from acr_stub import AGENTS
from agentcore_rl_harness import McpServer
from agentcore_rl_harness.mcp_servers import check_unique, stdio_only
from agentcore_rl_harness.errors import SandboxError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.isolation import IsolationChoice
from agentcore_rl_harness.runtimes.local import LocalRuntime
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig

SERVER = str(AGENTS / "mcp_probe_server.py")
PAYLOAD = {"_rollout": {"base_url": "http://127.0.0.1:9/v1", "model_id": "m", "api_key": "k"}}


def processes_with(marker: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text and "pytest" not in text:
            found.append(text)
    return found


def runtime_for(kind="bwrap", concurrency=1):
    return LocalRuntime(LocalRuntimeConfig(concurrency=concurrency, startup_timeout_s=60), kill_grace_s=0.5,
                        isolation=IsolationChoice(kind=kind))


async def session(runtime, servers, agent="mcp_client_agent.py", payload=PAYLOAD, session_id=None):
    return await runtime.run_session(
        agent=AgentRef(task="t", agent=str(AGENTS / agent), mcp_servers=tuple(servers)),
        session_id=session_id or "mcp-" + uuid.uuid4().hex, payload=payload, timeout_s=120)


async def run(servers, kind="bwrap", agent="mcp_client_agent.py"):
    runtime = runtime_for(kind)
    try:
        return await session(runtime, servers, agent)
    finally:
        await runtime.aclose()


async def wait_for(predicate, timeout_s=120.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (found := predicate()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)
    return found


def live_sandbox(runtime, session_id):
    try:
        return runtime.sandbox(session_id)
    except SandboxError:
        return None


async def connects(sandbox, port: int) -> bool:
    """Whether a process inside that session can open a TCP connection to 127.0.0.1:port."""
    result = await sandbox.exec([sys.executable, "-I", "-c", CONNECT, str(port)], timeout=30)
    assert result.exit_code in (0, 1), result
    return result.exit_code == 0


CONNECT = "import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', int(sys.argv[1]))) != 0)"


@pytest.mark.asyncio
async def test_an_http_server_runs_inside_its_session_only_and_dies_with_it():
    marker = "marker-" + uuid.uuid4().hex
    server = McpServer(name="probe", transport="http", command=("{python}", SERVER, "--port", "{port}", marker))
    stdio = McpServer(name="local", command=("{python}", SERVER, marker + "-stdio"))
    runtime = runtime_for(concurrency=2)
    try:
        owner_id, other_id = "mcp-owner-" + uuid.uuid4().hex, "mcp-other-" + uuid.uuid4().hex
        owner = asyncio.create_task(session(runtime, [server, stdio], payload={**PAYLOAD, "hold_s": 60},
                                            session_id=owner_id))
        answers = await wait_for(lambda: owner.done() or next(
            (json.loads(s.workdir.joinpath("answers.json").read_text()) for s in list(runtime._sessions.values())
             if s.workdir.joinpath("answers.json").exists()), None))
        assert not owner.done(), owner.result()
        port = int(answers["servers"]["probe"]["url"].rsplit(":", 1)[1].split("/")[0])
        other = asyncio.create_task(session(runtime, [], agent="slow_agent.py", payload={"sleep_s": 60},
                                            session_id=other_id))
        other_sandbox = await wait_for(lambda: live_sandbox(runtime, other_id))
        # the owner's own processes reach its server; another live session and the host do not
        assert await connects(runtime.sandbox(owner_id), port)
        assert not await connects(other_sandbox, port)
        assert socket.socket().connect_ex(("127.0.0.1", port)) != 0
        Path(runtime.sandbox(owner_id).workdir, "release").write_text("")
        outcome = await owner
        other.cancel()
    finally:
        await runtime.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    result = outcome.result
    http, piped = result["servers"]["probe"], result["servers"]["local"]
    assert http == {"transport": "streamable_http", "url": f"http://127.0.0.1:{port}/mcp"}
    assert piped == {"transport": "stdio", "command": sys.executable, "args": [SERVER, marker + "-stdio"], "env": None}
    for name in ("probe", "local"):
        answer = result["answers"][name]
        assert answer["tools"] == ["echo", "where"] and answer["echo"] == "echo: hi"
        # same working directory (the session's files) and network namespace as the agent
        assert f"cwd={result['cwd']} netns={result['netns']}" in answer["where"]
    assert result["netns"] != Path("/proc/self/ns/net").readlink().name  # its own namespace
    assert processes_with(marker) == []  # stopped with the session


CRASH = ("{python}", "-c", "import sys; sys.exit('mailbox server: cannot open /srv/mail (set MAIL_DIR)')")


@pytest.mark.asyncio
async def test_an_http_server_that_crashes_at_start_fails_the_session_as_task_error_with_its_output():
    server = McpServer(name="mail", transport="http", command=(*CRASH, "--port", "{port}"))
    outcome = await run([server], agent="echo_agent.py")
    assert outcome.status is Status.TASK_ERROR
    assert "MCP server 'mail'" in outcome.error and "exited before listening (exit code 1)" in outcome.error
    assert "cannot open /srv/mail (set MAIL_DIR)" in outcome.error
    assert "fix the task's McpServer(name='mail', command=...)" in outcome.error


@pytest.mark.asyncio
async def test_a_stdio_server_that_crashes_at_start_fails_every_session_of_the_run_checked_once():
    server = McpServer(name="mail", command=("{python}", "/nowhere/mail_server.py"))
    runtime = runtime_for()
    try:
        first = await session(runtime, [server], agent="echo_agent.py")
        started = time.monotonic()
        second = await session(runtime, [server], agent="echo_agent.py")
        second_s = time.monotonic() - started
    finally:
        await runtime.aclose()
    for outcome in (first, second):
        assert outcome.status is Status.TASK_ERROR and outcome.result is None  # the agent never ran
        assert "MCP server 'mail'" in outcome.error and "crashed at start, before answering MCP initialize" in outcome.error
        assert "can't open file '/nowhere/mail_server.py'" in outcome.error and "(exit code 2)" in outcome.error
    print(f"second session (server not checked again): {second_s:.1f}s")


@pytest.mark.asyncio
async def test_a_stdio_server_that_never_answers_fails_after_its_ready_timeout_instead_of_hanging_the_agent():
    server = McpServer(name="mute", ready_timeout_s=1.0, command=("{python}", "-c", "import time; time.sleep(60)"))
    outcome = await run([server], kind="none", agent="echo_agent.py")
    assert outcome.status is Status.TASK_ERROR and outcome.result is None
    assert "a stdio server: it did not answer MCP initialize within ready_timeout_s=1s" in outcome.error
    assert "(killed)" in outcome.error


@pytest.mark.asyncio
async def test_a_command_that_does_not_exist_is_named_before_the_agent_runs():
    missing = McpServer(name="ghost", command=("no-such-mcp-server", "--stdio"))
    not_a_file = McpServer(name="gone", transport="http", command=("/opt/nowhere/server", "--port", "{port}"))
    runtime = runtime_for()
    try:
        by_name = await session(runtime, [missing], agent="echo_agent.py")
        by_path = await session(runtime, [not_a_file], agent="echo_agent.py")
    finally:
        await runtime.aclose()
    assert by_name.status is Status.TASK_ERROR and by_path.status is Status.TASK_ERROR
    assert "MCP server 'ghost': its command 'no-such-mcp-server' is not on the PATH inside the session" in by_name.error
    assert "install it, give its absolute path" in by_name.error
    assert "MCP server 'gone': its command '/opt/nowhere/server' is not an executable file" in by_path.error


@pytest.mark.asyncio
async def test_an_http_server_that_never_listens_fails_after_its_ready_timeout():
    server = McpServer(name="slow", transport="http", ready_timeout_s=1.0,
                       command=("{python}", "-c", "import time, sys; print('{port}'); time.sleep(60)"))
    outcome = await run([server], kind="none", agent="echo_agent.py")
    assert outcome.status is Status.TASK_ERROR
    assert "did not listen within ready_timeout_s=1s (raise it if the server is slow to start) (killed)" in outcome.error


def test_a_declarations_mistakes_are_named():
    with pytest.raises(ValueError, match=r"put '\{port\}' in it"):
        McpServer(name="x", transport="http", command=("server",))
    with pytest.raises(ValueError, match="a stdio server has no port"):
        McpServer(name="x", command=("server", "{port}"))
    with pytest.raises(ValueError, match=r"transport='sse' is not supported; valid: \['stdio', 'http'\]"):
        McpServer(name="x", transport="sse", command=("server",))
    with pytest.raises(ValueError, match="non-empty argv"):
        McpServer(name="x", command=())
    with pytest.raises(ValueError, match=r"is one string; give the argv as a list, e.g. \['python', 'server.py'\]"):
        McpServer(name="x", command="python server.py")
    with pytest.raises(ValueError, match="must start with '/'"):
        McpServer(name="x", transport="http", command=("s", "{port}"), path="mcp")
    with pytest.raises(ValueError, match="ready_timeout_s=0 must be"):
        McpServer(name="x", command=("s",), ready_timeout_s=0)
    with pytest.raises(ValueError, match="name must be 1-64 letters"):
        McpServer(name="has space", command=("server",))
    with pytest.raises(ValueError, match=r"names must be unique, \['x'\] repeat"):
        check_unique((McpServer(name="x", command=("a",)), McpServer(name="x", command=("b",))), task="t")
    with pytest.raises(TypeError, match=r"takes arl.McpServer\(...\) entries"):
        check_unique(({"name": "x"},), task="t")


def test_task_fills_in_the_task_dir_and_agentcore_gets_stdio_servers_only():
    import agentcore_rl_harness as arl
    from agentcore_rl_harness.tasks import task_spec

    @arl.task(dataset="d.jsonl", mcp_servers=[McpServer(name="s", command=("{python}", "{task_dir}/server.py"))])
    def test_t(rollout, row):
        pass

    (server,) = task_spec(test_t).mcp_servers
    assert server.command == ("{python}", f"{Path(__file__).parent}/server.py")
    assert stdio_only((server,)) == {"mcp_servers": {"s": {
        "transport": "stdio", "command": "python", "args": [f"{Path(__file__).parent}/server.py"], "env": None}}}
    with pytest.raises(ValueError, match="only runtime=local starts"):
        stdio_only((McpServer(name="h", transport="http", command=("s", "{port}")),))
