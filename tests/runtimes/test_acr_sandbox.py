"""Shell and files in an AgentCore session (`runtimes/_acr_commands.py`): real boto3 ->
InvokeAgentRuntimeCommand on the loopback data-plane stub, which runs each command with
/bin/sh in the session's directory and answers with a binary AWS event stream."""

from __future__ import annotations

import asyncio
import os

import pytest
import pytest_asyncio
from botocore.eventstream import EventStreamBuffer

from acr_stub import (
    INTERNAL,
    Fault,
    alive,
    encode_event,
    load_agent_app,
    new_session_id,
    serve,
    serve_data_plane,
)
from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.errors import SandboxError
from agentcore_rl_harness.runtimes._acr_commands import AcrBackgroundProcess, AcrSessionSandbox
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.sandbox import ExecResult

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("aws_credentials")]

ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/sandbox-Ab12Cd34Ef"
UNKNOWN_ARN = "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/missing-Ab12Cd34Ef"


@pytest.fixture
def stub():
    with serve_data_plane({ARN: "http://127.0.0.1:9"}) as plane:
        yield plane


@pytest_asyncio.fixture
async def runtime(stub):
    rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=stub.url, retry_backoff_s=0.01, qualifier="prod"))
    yield rt
    await rt.aclose()


@pytest.fixture
def sandbox(runtime):
    return runtime.sandbox(new_session_id(), task="t")


async def test_the_stub_speaks_the_event_stream_botocore_decodes():
    buffer = EventStreamBuffer()
    buffer.add_data(encode_event({"contentDelta": {"stdout": "h\u00e9"}}))
    [message] = list(buffer)
    assert message.headers[":event-type"] == "chunk" and message.payload.endswith(b"}")


async def test_exit_code_cwd_and_env_through_the_real_client(sandbox, stub):
    await sandbox.exec(["mkdir", "-p", "sub dir"])
    result = await sandbox.exec(["sh", "-c", 'pwd; echo "$GREETING"; echo oops >&2; exit 3'],
                                cwd="sub dir", env={"GREETING": "it's $HOME"})
    assert isinstance(result, ExecResult)
    home = stub.session_dirs[sandbox.session_id]
    assert result.stdout == f"{home}/sub dir\nit's $HOME\n" and result.stderr == "oops\n"
    assert result.exit_code == 3 and not result.ok and not result.timed_out
    ok = await sandbox.exec(["true"])
    assert ok.ok and ok.exit_code == 0
    call = stub.commands[-1]
    assert (call["arn"], call["session_id"], call["qualifier"]) == (ARN, sandbox.session_id, "prod")
    assert call["timeout"] == 60
    with pytest.raises(SandboxError, match="non-empty argv"):
        await sandbox.exec([])
    with pytest.raises(SandboxError, match="'BAD-NAME' is not valid"):
        await sandbox.exec(["true"], env={"BAD-NAME": "x"})


async def test_stdin_is_fed_to_the_command(sandbox):
    result = await sandbox.exec(["wc", "-c"], stdin=b"\x00\x01 binary\n")
    assert result.stdout.strip() == "10"


async def test_output_is_capped_while_streaming_and_the_truncation_flagged(sandbox):
    script = "head -c 1000000 /dev/zero | tr '\\0' a; echo err >&2"
    result = await sandbox.exec(["sh", "-c", script])
    assert len(result.stdout) == 256 * 1024 and result.stdout_truncated
    assert result.stderr == "err\n" and not result.stderr_truncated
    assert result.exit_code == 0


async def test_the_service_timeout_kills_the_command(sandbox, stub):
    result = await sandbox.exec(["sh", "-c", "echo started; sleep 30"], timeout=0.5)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "started\n" and result.elapsed_s < 5
    assert stub.commands[-1]["timeout"] == 1  # the service counts whole seconds


async def test_a_stalled_stream_is_abandoned_at_the_client_deadline(runtime, stub):
    stub.enforce_command_timeouts = False
    sandbox = runtime.sandbox(new_session_id(), task="t")
    sandbox.deadline_grace_s = 0.5
    started = asyncio.get_running_loop().time()
    result = await sandbox.exec(["sh", "-c", "echo started; sleep 20"], timeout=1)
    assert result.timed_out and result.exit_code is None and result.stdout == "started\n"
    assert asyncio.get_running_loop().time() - started < 5


async def test_background_handles_report_status_result_and_kill(sandbox, stub):
    quick = await sandbox.exec(["sh", "-c", "sleep 0.3; echo done; exit 4"], background=True)
    slow = await sandbox.exec(["sh", "-c", "sleep 60 & sleep 60"], background=True)
    assert isinstance(quick, AcrBackgroundProcess) and quick.status() == "running"
    assert alive(slow.pid)
    finished = await quick.result(timeout=10)
    assert (finished.stdout, finished.exit_code) == ("done\n", 4) and quick.status() == "exited"
    with pytest.raises(TimeoutError):
        await slow.result(timeout=0.3)
    assert slow.running
    killed = await slow.kill()
    assert killed.exit_code == -9 and not slow.running and not killed.timed_out
    assert not alive(slow.pid)
    leftovers = await sandbox.exec(["sh", "-c", 'ls -A "$TMPDIR/.arl-bg"'])
    assert leftovers.stdout == ""  # the handle's files are removed once read


async def test_a_background_timeout_kills_the_whole_group(sandbox):
    handle = await sandbox.exec(["sh", "-c", "echo begun; sleep 60"], background=True, timeout=0.5)
    result = await handle.result(timeout=10)
    assert result.timed_out and result.exit_code is None and result.stdout == "begun\n"
    assert not alive(handle.pid)


async def test_background_output_is_capped(sandbox):
    handle = await sandbox.exec(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' b"],
                                background=True)
    result = await handle.result(timeout=10)
    assert len(result.stdout) == 256 * 1024 and result.stdout_truncated and result.ok


async def test_aclose_kills_what_still_runs_and_ends_the_sandbox(runtime):
    sandbox = runtime.sandbox(new_session_id(), task="t")
    handle = await sandbox.exec(["sleep", "60"], background=True)
    await sandbox.aclose()
    assert not handle.running and not alive(handle.pid)
    with pytest.raises(SandboxError, match="has ended"):
        await sandbox.exec(["true"])


async def test_binary_files_over_64_kib_round_trip_in_chunks(sandbox, stub):
    data = os.urandom(200 * 1024) + bytes(range(256))
    before = len(stub.commands)
    await sandbox.put_file("out/deep/data.bin", data, mode=0o600)
    assert len(stub.commands) - before >= 4  # 64 KiB commands carry about 48 KiB each
    assert all(len(call["command"]) <= 65536 for call in stub.commands)
    home = stub.session_dirs[sandbox.session_id]
    assert (home / "out/deep/data.bin").read_bytes() == data
    assert oct((home / "out/deep/data.bin").stat().st_mode & 0o777) == "0o600"
    assert await sandbox.get_file("out/deep/data.bin") == data
    await sandbox.put_file("empty.txt", "")
    assert await sandbox.get_file("empty.txt") == b""
    assert [p.name for p in (home / "out/deep").iterdir()] == ["data.bin"]  # no partial left


async def test_file_errors_name_the_path_and_session(sandbox):
    with pytest.raises(SandboxError, match=rf"missing\.txt.*{sandbox.session_id}"):
        await sandbox.get_file("missing.txt")
    await sandbox.put_file("small.bin", b"x" * 1000)
    with pytest.raises(SandboxError, match="larger than max_bytes=100"):
        await sandbox.get_file("small.bin", max_bytes=100)
    await sandbox.exec(["mkdir", "ro"])
    await sandbox.exec(["chmod", "500", "ro"])
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(SandboxError, match="ro/f"):
            await sandbox.put_file("ro/f", "x")


async def test_an_unknown_runtime_arn_is_a_sandbox_error_with_the_fix(stub):
    sandbox = AcrSessionSandbox(_client(stub), UNKNOWN_ARN, new_session_id())
    with pytest.raises(SandboxError) as raised:
        await sandbox.exec(["true"])
    text = str(raised.value)
    assert "ResourceNotFoundException" in text and UNKNOWN_ARN in text
    assert sandbox.session_id in text and "list-agent-runtimes" in text
    with pytest.raises(SandboxError, match="missing.txt"):
        await sandbox.get_file("missing.txt")


async def test_faults_at_the_seam_become_sandbox_errors(runtime, stub):
    sandbox = runtime.sandbox(new_session_id(), task="t")
    stub.command_faults[:] = [Fault(429, "ThrottlingException", "Rate exceeded")]
    assert (await sandbox.exec(["echo", "hi"])).stdout == "hi\n"  # resent: it never ran
    stub.command_faults[:] = [INTERNAL]
    with pytest.raises(SandboxError, match=r"'hi'\) in session .*InternalServerException"):
        await sandbox.exec(["echo", "hi"])
    stub.command_faults[:] = [Fault(424, "RuntimeClientError", "container died", after_agent=True)]
    with pytest.raises(SandboxError, match="runtimeClientError.*container died"):
        await sandbox.exec(["echo", "hi"])
    with pytest.raises(SandboxError, match="65536"):
        await sandbox.exec(["echo", "x" * 70000])


async def test_a_live_sessions_sandbox_ends_with_it(stub):
    _, app = load_agent_app("scripted_agent.py")
    agent = serve(app)
    stub.agents[ARN] = agent.url
    rt = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": ARN}, endpoint_url=stub.url, retry_backoff_s=0.01))
    session_id = new_session_id()
    try:
        with pytest.raises(SandboxError, match="no live AgentCore session"):
            rt.sandbox(session_id)
        session = asyncio.create_task(rt.run_session(
            agent=AgentRef(task="t", agent=None), session_id=session_id,
            payload={"mode": "sleep", "sleep_s": 1.5, "x": 1}, timeout_s=20))
        while session_id not in rt._live:
            await asyncio.sleep(0.01)
        sandbox = rt.sandbox(session_id)
        assert rt.sandbox(session_id) is sandbox
        handle = await sandbox.exec(["sleep", "60"], background=True)
        outcome = await session
        assert outcome.result["answer"] == 2
        assert not alive(handle.pid) and session_id in stub.stopped_sessions
        with pytest.raises(SandboxError, match="has ended"):
            await sandbox.exec(["true"])
        stale = AcrSessionSandbox(_client(stub), ARN, session_id)
        with pytest.raises(SandboxError, match="ResourceNotFoundException.*ended"):
            await stale.exec(["true"])
    finally:
        await rt.aclose()
        agent.stop()


def _client(stub):
    import boto3
    from botocore.config import Config

    return boto3.client("bedrock-agentcore", region_name="us-west-2", endpoint_url=stub.url,
                        config=Config(retries={"total_max_attempts": 1}))
