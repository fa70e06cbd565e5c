"""Exposing the gateway: HTTPS with a certificate made at test time (real openai and anthropic
clients), the admin API on its own loopback listener, failed-key rate limiting per peer, and the
runtime=agentcore refusal of clear-text session keys."""

from __future__ import annotations

import datetime
import ipaddress
import ssl

import anthropic
import httpx
import openai
import pytest

from agentcore_rl_harness.errors import ConfigError, HarnessError
from agentcore_rl_harness.gateway.guard import FailedKeyLimiter
from agentcore_rl_harness.gateway.config import GatewayConfig, GatewayTLS
from agentcore_rl_harness.run.compose import check_public_gateway_url


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and localhost: (certfile, keyfile)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentcore-rl test gateway")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(certfile), str(keyfile)


def test_tls_served_directly_to_real_sdk_clients(gateway_factory, certificate):
    certfile, keyfile = certificate
    server, sampler = gateway_factory(["over https", "anthropic too"],
                                      config=GatewayConfig(tls=GatewayTLS(certfile=certfile, keyfile=keyfile)))
    assert server.base_url.startswith("https://127.0.0.1:")
    session_id = server.sessions.open()
    trusted = ssl.create_default_context(cafile=certfile)
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0,
                           http_client=httpx.Client(verify=trusted))
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "over https"
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id,
                                 max_retries=0, http_client=anthropic.DefaultHttpxClient(verify=trusted))
    message = claude.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "anthropic too"
    assert server.sessions.finish(session_id).turns == 2
    client.close()
    claude.close()
    with pytest.raises(httpx.ConnectError):  # an untrusted certificate is not silently accepted
        httpx.get(server.base_url.removesuffix("/v1") + "/health")
    with pytest.raises(httpx.HTTPError):  # no plain HTTP on the TLS port
        httpx.get(server.base_url.replace("https:", "http:").removesuffix("/v1") + "/health")


def test_bad_tls_files_are_a_clear_error(gateway_factory, certificate, tmp_path):
    certfile, _ = certificate
    with pytest.raises(HarnessError, match="both gateway.tls.certfile and gateway.tls.keyfile"):
        gateway_factory([], config=GatewayConfig(tls=GatewayTLS(certfile=certfile)))
    (tmp_path / "key.pem").write_text("not a key")
    with pytest.raises(HarnessError, match="cannot load the gateway's TLS certificate"):
        gateway_factory([], config=GatewayConfig(tls=GatewayTLS(certfile=certfile, keyfile=str(tmp_path / "key.pem"))))


def test_admin_api_on_its_own_loopback_listener(gateway_factory):
    server, _ = gateway_factory(["ok"], config=GatewayConfig(separate_admin=True), admin_token="t")
    public = server.base_url.removesuffix("/v1")
    assert server.admin_url != public and server.admin_url.startswith("http://127.0.0.1:")
    headers = {"X-Admin-Token": "t"}
    assert httpx.post(public + "/admin/sessions", json={}, headers=headers).status_code == 404
    opened = httpx.post(server.admin_url + "/admin/sessions", json={}, headers=headers)
    assert opened.status_code == 201
    session_id = opened.json()["session_id"]
    reply = httpx.post(server.base_url + "/chat/completions", headers={"Authorization": f"Bearer {session_id}"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 200
    assert httpx.post(f"{server.admin_url}/admin/sessions/{session_id}/finish", headers=headers).json()["turns"] == 1
    assert httpx.post(server.base_url + "/chat/completions", json={"messages": []}).status_code == 401


def test_a_non_loopback_host_keeps_the_admin_api_off_the_network(renderer):
    assert GatewayConfig(host="0.0.0.0").admin_apart and GatewayConfig(host="10.1.2.3").admin_apart
    assert not GatewayConfig().admin_apart and not GatewayConfig(host="::1").admin_apart


def test_failed_key_attempts_are_rate_limited_per_peer(gateway_factory):
    server, _ = gateway_factory(["ok"] * 4, config=GatewayConfig(failed_key_limit=3), admin_token="t")
    good = server.sessions.open()
    finished = server.sessions.open()
    server.sessions.finish(finished)
    chat = server.base_url + "/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    def send(key, path=chat):
        return httpx.post(path, json=body, headers={"Authorization": f"Bearer {key}"})

    for _ in range(5):  # a finished session's key is a legitimate late client, not a guess
        assert send(finished).status_code == 401
    assert send(good).status_code == 200
    assert send("guess-1").status_code == 401
    assert httpx.post(server.admin_url + "/admin/sessions", headers={"X-Admin-Token": "wrong"}).status_code == 401
    assert send("guess-2", server.base_url + "/messages").status_code == 401
    blocked = send(good)
    assert blocked.status_code == 429 and blocked.json()["error"]["code"] == "too_many_failed_keys"
    assert 1 <= int(blocked.headers["Retry-After"]) <= 60
    anthropic_blocked = send("guess-3", server.base_url + "/messages")
    assert anthropic_blocked.status_code == 429
    assert anthropic_blocked.json()["error"]["type"] == "rate_limit_error"
    assert httpx.post(server.admin_url + "/admin/sessions", headers={"X-Admin-Token": "t"}).status_code == 429


def test_failed_key_limiter_window_and_bounded_peers():
    now = [0.0]
    limiter = FailedKeyLimiter(limit=2, window_s=10, max_peers=3, clock=lambda: now[0])
    limiter.failed("a")
    assert limiter.retry_after("a") is None
    now[0] = 4
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(6)
    assert limiter.retry_after("b") is None
    now[0] = 10.5  # the first failure aged out
    assert limiter.retry_after("a") is None
    for peer in "bcde":
        limiter.failed(peer)
        limiter.failed(peer)
    assert len(limiter._failures) == 3 and limiter.retry_after("e") is not None


def test_agentcore_refuses_clear_text_session_keys():
    with pytest.raises(ConfigError, match="clear text"):
        check_public_gateway_url("http://gw.example.com:8080/v1")
    with pytest.raises(ConfigError, match="tls_terminated_upstream"):
        check_public_gateway_url("https://alb.example.com/v1", serves_plain_http=True, bound_to="0.0.0.0")
    assert check_public_gateway_url("https://alb.example.com/v1", serves_plain_http=True, bound_to="0.0.0.0",
                                    tls_terminated_upstream=True) == "https://alb.example.com/v1"
    assert check_public_gateway_url("http://10.0.0.5:8080/v1", tls_terminated_upstream=True)
    assert check_public_gateway_url("https://gw.example.com/v1", serves_plain_http=False, bound_to="0.0.0.0")
    with pytest.raises(ConfigError, match="AgentCore cannot reach"):
        check_public_gateway_url("https://127.0.0.1:8443/v1", tls_terminated_upstream=True)
