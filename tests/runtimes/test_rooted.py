"""Sessions in a task's environment: the Debian-built Java root is the session's `/` (read-only),
with its own python3 serving the agent, its JDK, the session's writable directory, the agent's
code and the gateway reachable; the kept files are scored in the same root. Refusals say why."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from acr_stub import AGENTS
from agentcore_rl_harness.errors import ConfigError, EnvironmentBuildError
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.local import LocalRuntime
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig

pytestmark = pytest.mark.asyncio
PROBE = str(AGENTS / "env_probe_agent.py")
REPO = Path(__file__).resolve().parents[2]


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = f"gateway saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway_stand_in():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


async def test_a_session_runs_in_its_environment(java_environment, gateway_stand_in):
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, isolation="bwrap"))
    agent = AgentRef(task="probe", agent=PROBE, environment=str(java_environment.spec.source))
    host_only = [str(REPO / "README.md"), str(Path.home() / ".cache"), "/etc/pip.conf", "/opt/pypi"]
    hidden = [path for path in host_only if Path(path).exists()]  # the host has them, the root not
    try:
        outcome = await runtime.run_session(
            agent=agent, session_id="env-probe", keep_state=True, timeout_s=120,
            payload={"_rollout": {"base_url": gateway_stand_in}, "host_paths": [PROBE, *hidden]})
        assert outcome.status.value == "completed", outcome.error
        seen = outcome.result
        assert seen["python"] == "/usr/bin/python3" and seen["prefix"] == "/usr"  # the root's own
        assert seen["version"].startswith("3.11")
        assert seen["pretty_name"] == 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"'
        assert seen["javac"] == "/usr/bin/javac" and seen["java_options"].startswith("-Xmx256m")
        assert seen["host_paths"] == {PROBE: True, **{path: False for path in hidden}}
        assert (seen["root_writable"], seen["usr_writable"], seen["tmp_writable"]) == (False, False, True)
        assert seen["fetched"] == "gateway saw /v1/probe"
        kept = runtime.kept(outcome, session_id="env-probe")
        sandbox = await kept.open()
        try:
            compiled = await sandbox.exec(["javac", "-version"], timeout=120)
            assert compiled.ok and "javac 17" in compiled.stdout + compiled.stderr
            assert (await sandbox.get_file(f"{sandbox.workdir}/made-by-agent.txt")) == b"hello from the environment\n"
            release = await sandbox.exec(["cat", "/etc/debian_version"])
            assert release.stdout.startswith("12.")
        finally:
            await kept.aclose()
    finally:
        await runtime.aclose()


@pytest.mark.parametrize("named_by", ["task", "config"])
async def test_an_unbuilt_environment_is_refused_with_the_fix(tmp_path, monkeypatch, named_by):
    monkeypatch.setenv("AGENTCORE_RL_CACHE", str(tmp_path / "cache"))
    spec = tmp_path / "env.yaml"
    spec.write_text("name: later\ndebian: {packages: [junit4]}\n")
    by_config = {"t": str(spec)} if named_by == "config" else {}  # runtime.environments.<task>
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, isolation="bwrap", environments=by_config))
    agent = AgentRef(task="t", agent=PROBE, environment=None if by_config else str(spec))
    try:
        with pytest.raises(EnvironmentBuildError, match="is not built: run `agentcore-rl env build") as raised:
            await runtime.run_session(agent=agent, session_id="s", payload={}, timeout_s=30)
        assert str(spec) in str(raised.value)
    finally:
        await runtime.aclose()


async def test_an_environment_needs_bubblewrap_sessions(java_environment):
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=1, isolation="none"))
    agent = AgentRef(task="probe", agent=PROBE, environment=str(java_environment.spec.source))
    try:
        with pytest.raises(ConfigError, match="needs bubblewrap sessions, but runtime.isolation is 'none'"):
            await runtime.run_session(agent=agent, session_id="s", payload={}, timeout_s=30)
    finally:
        await runtime.aclose()
