"""An isolated local session reaches only its gateway and `runtime.network.allow` (`network.py`).

Real bubblewrap sessions (their own network namespace), real loopback servers outside them, a
hostile agent that tries to reach those servers, and the real openai SDK agent talking to its
gateway through the relay.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from acr_stub import AGENTS, agent_ref, fake_model_app, serve
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.isolation import IsolationChoice
from agentcore_rl_harness.runtimes.local import LocalRuntime
from agentcore_rl_harness.runtimes.network import (
    Destination,
    NetworkPolicy,
    parse_destination,
    plan_relays,
    url_destination,
)

HOSTILE = AgentRef(task="network", agent=str(AGENTS / "hostile_agent.py"))


class LineServer:
    """A loopback TCP server outside every sandbox: answers `<name>` to each connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                conn.makefile("rb").readline()
                conn.sendall(f"{self.name}\n".encode())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def servers():
    made = {name: LineServer(name) for name in ("gateway", "outside", "allowed")}
    yield made
    for server in made.values():
        server.close()


def _payload(servers, role="network", **extra):
    return {"role": role, "outside_port": servers["outside"].port,
            "allowed_port": servers["allowed"].port, **extra,
            "_rollout": {"base_url": f"http://127.0.0.1:{servers['gateway'].port}/v1", "api_key": "k"}}


def _runtime(**network):
    return LocalRuntime(LocalRuntimeConfig(concurrency=2, startup_timeout_s=30), kill_grace_s=0.5, isolation=IsolationChoice(
        kind="bwrap", network=NetworkPolicy(**network)))


@pytest.mark.asyncio
async def test_a_hostile_session_reaches_its_gateway_and_what_is_allowed_and_nothing_else(servers):
    runtime = _runtime(allow=(f"127.0.0.1:{servers['allowed'].port}",))
    try:
        outcome = await runtime.run_session(agent=HOSTILE, session_id="net-" + "a" * 40,
                                            payload=_payload(servers), timeout_s=60)
    finally:
        await runtime.aclose()
    assert outcome.status is Status.COMPLETED, outcome.error
    got = outcome.result
    assert got["gateway"] == {"ok": True, "value": repr("gateway\n")}
    assert got["allowed"] == {"ok": True, "value": repr("allowed\n")}
    for attempt in ("outside_loopback", "outside_by_name"):
        assert not got[attempt]["ok"] and "ConnectionRefusedError" in got[attempt]["error"], got[attempt]
    assert not got["public_address"]["ok"] and "unreachable" in got["public_address"]["error"]
    assert not got["dns"]["ok"]
    assert servers["outside"].connections == 0  # nothing got through, by any route
    assert servers["gateway"].connections == 1 and servers["allowed"].connections == 1


@pytest.mark.asyncio
async def test_commands_run_in_a_live_session_share_its_network_walls(servers):
    runtime = _runtime()
    session_id = "net-" + "b" * 40
    session = asyncio.create_task(runtime.run_session(
        agent=HOSTILE, session_id=session_id, payload=_payload(servers, role="victim", wait_s=60),
        timeout_s=90))
    try:
        while not any((s.workdir / "SECRET_FROM_A").exists() for s in runtime._sessions.values()):
            await asyncio.sleep(0.05)
        sandbox = runtime.sandbox(session_id)
        probe = ("import socket, sys\n"
                 "for port in map(int, sys.argv[1:]):\n"
                 "    try:\n"
                 "        s = socket.create_connection(('127.0.0.1', port), timeout=5); s.sendall(b'x\\n')\n"
                 "        print(port, s.makefile().readline().strip())\n"
                 "    except OSError as exc:\n"
                 "        print(port, type(exc).__name__)\n")
        result = await sandbox.exec(["python3", "-c", probe, str(servers["gateway"].port),
                                     str(servers["outside"].port)])
        assert result.stdout.split("\n")[:2] == [f"{servers['gateway'].port} gateway",
                                                 f"{servers['outside'].port} ConnectionRefusedError"]
    finally:
        session.cancel()
        await runtime.aclose()
    assert servers["outside"].connections == 0


@pytest.mark.asyncio
async def test_network_mode_host_shares_the_hosts_network(servers):
    runtime = _runtime(mode="host")
    try:
        outcome = await runtime.run_session(agent=HOSTILE, session_id="net-" + "c" * 40,
                                            payload=_payload(servers), timeout_s=60)
    finally:
        await runtime.aclose()
    assert outcome.result["outside_loopback"] == {"ok": True, "value": repr("outside\n")}


@pytest.mark.asyncio
async def test_the_real_openai_sdk_agent_reaches_its_gateway_through_the_relay():
    seen: list[dict] = []
    model = serve(fake_model_app(seen))
    runtime = _runtime()
    session_id = "net-" + "d" * 40
    try:
        outcome = await runtime.run_session(
            agent=agent_ref("art_style_agent.py"), session_id=session_id, timeout_s=60,
            payload={"prompt": "6 * 7?", "answer": "42", "_rollout": {
                "base_url": model.url + "/v1", "model_id": "policy", "api_key": session_id,
                "sampling_params": {"max_tokens": 16}}})
    finally:
        await runtime.aclose()
        model.stop()
    assert outcome.status is Status.COMPLETED, outcome.error
    assert outcome.result["answer"] == "42" and outcome.result["rewards"] == [1.0]
    assert [call["authorization"] for call in seen] == [f"Bearer {session_id}"]


@pytest.mark.asyncio
async def test_a_named_destination_gets_its_own_loopback_address_in_the_sessions_hosts(servers):
    runtime = _runtime(allow=("tools.internal:9000",))
    try:
        outcome = await runtime.run_session(agent=HOSTILE, session_id="net-" + "e" * 40,
                                            payload=_payload(servers), timeout_s=60)
    finally:
        await runtime.aclose()
    hosts = eval(outcome.result["hosts"]["value"])  # the repr of the session's /etc/hosts
    assert "127.0.100.1 tools.internal" in hosts.splitlines()
    assert not list(runtime._sessions)  # the hosts file went with the session


def test_destinations_are_checked_and_planned():
    assert parse_destination("API.example.com:443") == Destination("api.example.com", 443)
    assert parse_destination("127.0.0.2:80") == Destination("127.0.0.2", 80)
    for bad, said in (("example.com", "not host:port"), ("h:0", "not host:port"),
                      ("10.1.2.3:5432", "by name"), ("[::1]:80", "IPv6")):
        with pytest.raises(ConfigError, match=said):
            parse_destination(bad)
    with pytest.raises(ConfigError, match="runtime.network.mode must be one of isolated, host"):
        NetworkPolicy(mode="open").check()
    assert url_destination("https://gw.example.com/v1") == Destination("gw.example.com", 443)
    assert url_destination("http://127.0.0.1:8123/v1") == Destination("127.0.0.1", 8123)
    assert url_destination("") is None
    plan = plan_relays([Destination("127.0.0.1", 8123), Destination("a.test", 443),
                        Destination("b.test", 443), Destination("a.test", 80),
                        Destination("localhost", 9), Destination("127.0.0.1", 8123),
                        Destination("localhost", 8123)])
    assert [(ip, d.port) for ip, d in plan.binds] == [
        ("127.0.0.1", 8123), ("127.0.100.1", 443), ("127.0.100.2", 443), ("127.0.100.1", 80),
        ("127.0.0.1", 9)]
    assert plan.hosts == {"a.test": "127.0.100.1", "b.test": "127.0.100.2"}
    assert plan_relays([Destination("127.0.0.1", 1)]).hosts_file() is None


def test_an_unprivileged_harness_shares_the_hosts_network_and_says_so(monkeypatch, caplog):
    """setns(2) into a session's network namespace needs root: without it, a warning and `host`."""
    from agentcore_rl_harness.runtimes.isolation import Bubblewrap, build_isolation

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with caplog.at_level("WARNING"):
        isolation = build_isolation(IsolationChoice(kind="bwrap", network=NetworkPolicy(
            allow=("127.0.0.1:8000",))))
    assert isinstance(isolation, Bubblewrap) and not isolation.isolates_network
    assert isolation.network.allow == ("127.0.0.1:8000",)
    assert "needs the harness to run as root" in caplog.text
    assert "--unshare-net" not in isolation.launch(["true"], workdir=Path("/tmp")).argv
