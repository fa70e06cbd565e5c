"""The samplers' HTTP/1.1 client (`samplers/_pool.py`, `_response.py`) against real loopback servers.

`RawServer` (from test_http_client.py) writes exact bytes, so these tests decide when a socket
closes, what a head looks like and how fast bytes come: stale keep-alive connections, idle
expiry, the connection limit, `Connection: close`, interim 1xx answers, malformed answers, a
slow reader (pause/resume), a stall mid-stream, header injection, and HTTPS.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl

import pytest
from test_http_client import RawServer, json_answer, sample, sse, vllm_choice

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import routing_key
from agentcore_rl_harness.samplers import _response
from agentcore_rl_harness.samplers._http import HttpClient
from agentcore_rl_harness.samplers._pool import ConnectionPool
from agentcore_rl_harness.samplers.vllm import VLLMSampler

OK = {"choices": [vllm_choice([4], "stop")]}


def test_a_stale_keep_alive_connection_is_resent_once_on_a_fresh_one():
    """The server drops the second request on a reused connection without a byte (as when its
    keep-alive timer fires as the request arrives): it goes once more, on a new connection."""
    def script(request):
        return None if len(server.requests) == 2 else json_answer(OK)
    server = RawServer(script)
    with server.running() as url:
        async def run():
            sampler = VLLMSampler(url)
            try:
                for _ in range(2):
                    assert (await sampler.sample(prompt_token_ids=[1], params=_params())).token_ids == (4,)
            finally:
                await sampler.aclose()
        asyncio.run(run())
    assert len(server.requests) == 3 and server.connections == 2


def test_an_answer_cut_after_its_first_bytes_is_not_resent():
    def script(request):
        if len(server.requests) == 2:
            return [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-len", None]
        return json_answer(OK)
    server = RawServer(script)
    with server.running() as url:
        async def run():
            sampler = VLLMSampler(url)
            try:
                await sampler.sample(prompt_token_ids=[1], params=_params())
                with pytest.raises(SamplingError, match="ConnectionDropped: the server closed the connection mid-answer"):
                    await sampler.sample(prompt_token_ids=[1], params=_params())
            finally:
                await sampler.aclose()
        asyncio.run(run())
    assert len(server.requests) == 2  # a request the server may have started on is never sent twice


@pytest.mark.parametrize("pause_s, connections", [(0.0, 1), (0.3, 2)])
def test_idle_connections_expire_before_the_server_closes_them(pause_s, connections):
    server = RawServer(lambda request: json_answer(OK))
    with server.running() as url:
        async def run():
            pool = ConnectionPool(max_connections=8, connect_timeout_s=5, read_timeout_s=5, idle_timeout_s=0.15)
            for _ in range(2):
                response = await pool.post(url + "/inference/v1/generate", b"{}", {})
                assert json.loads(await response.read()) == OK
                await asyncio.sleep(pause_s)
            pool.close()
        asyncio.run(run())
    assert server.connections == connections


def test_max_connections_bounds_open_sockets_and_the_rest_wait_their_turn():
    async def slow(request):
        await asyncio.sleep(0.02)
        return json_answer({"choices": [vllm_choice([request["body"]["n"]], "stop")]})
    server = RawServer(slow)
    with server.running() as url:
        async def run():
            client = HttpClient(engine="vLLM", max_connections=3)
            try:
                answers = await asyncio.gather(*(client.post(url + "/g", {"n": n}) for n in range(30)))
            finally:
                await client.aclose()
            return [answer[0]["choices"][0]["token_ids"] for answer in answers]
        assert asyncio.run(run()) == [[n] for n in range(30)]
    assert server.most_open <= 3 and server.connections == 3


def test_a_connection_close_answer_is_never_reused():
    body = json.dumps(OK).encode()
    answer = [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
              % (len(body), body)]
    server = RawServer(lambda request: answer)  # keeps its side open: only the header says close
    with server.running() as url:
        for _ in range(2):
            assert sample(VLLMSampler(url)).token_ids == (4,)
        sampler = VLLMSampler(url)

        async def twice():
            try:
                for _ in range(2):
                    await sampler.sample(prompt_token_ids=[1], params=_params())
            finally:
                await sampler.aclose()
        asyncio.run(twice())
    assert server.connections == 4


def test_an_interim_100_answer_is_skipped():
    server = RawServer(lambda request: [b"HTTP/1.1 100 Continue\r\n\r\n", *json_answer(OK)])
    with server.running() as url:
        assert sample(VLLMSampler(url)).token_ids == (4,)


@pytest.mark.parametrize("answer", [[b"SPDY/9 200 OK\r\n\r\n"], [b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"]])
def test_a_malformed_answer_is_a_dropped_connection_naming_it(answer):
    with RawServer(lambda request: answer).running() as url:
        with pytest.raises(SamplingError, match=r"ConnectionDropped: malformed HTTP answer"):
            sample(VLLMSampler(url))


def test_a_slow_reader_pauses_the_socket_and_loses_nothing(monkeypatch):
    """2 MB of events read slower than they come, with a 4 KB buffer bound: reading pauses and
    resumes hundreds of times, and every event arrives once, in order."""
    monkeypatch.setattr(_response, "HIGH_WATER", 4096)
    events = [b"data: " + json.dumps({"i": i, "pad": "x" * 1000}).encode() + b"\n\n" for i in range(2000)]
    server = RawServer(lambda request: sse(*events, b"data: [DONE]\n\n"))
    with server.running() as url:
        async def run():
            client = HttpClient(engine="vLLM", timeout_s=10)
            seen = []
            try:
                async for item in client.post_events(url + "/g", {}):
                    seen.append(item["i"])
                    if len(seen) % 100 == 0:
                        await asyncio.sleep(0.01)
            finally:
                await client.aclose()
            return seen
        assert asyncio.run(run()) == list(range(2000))


def test_the_rest_of_a_paused_stream_is_read_after_done(monkeypatch):
    """`[DONE]` came with the first event; 100 KB more (comments) arrive while the reader dawdles
    and pause the socket: reading the rest must resume it, not wait forever."""
    monkeypatch.setattr(_response, "HIGH_WATER", 4096)
    head, first, end = sse(b"data: {\"i\": 0}\n\ndata: [DONE]\n\n")
    pad = b"%x\r\n%s\r\n" % (1000, b":" + b"p" * 998 + b"\n")
    server = RawServer(lambda request: [head, first, 0.1, *[pad] * 100, end])
    with server.running() as url:
        async def run():
            client = HttpClient(engine="vLLM", timeout_s=10)
            seen = []
            try:
                async for item in client.post_events(url + "/g", {}):
                    seen.append(item)
                    await asyncio.sleep(0.5)
                return seen
            finally:
                await client.aclose()
        assert asyncio.run(asyncio.wait_for(run(), 5)) == [{"i": 0}]


def test_a_stream_that_stalls_midway_is_a_timeout():
    head, first, *_ = sse(b'data: {"choices": [{"token_ids": [7], "logprobs": {"content": [{"logprob": -1.0}]}}]}\n\n')
    server = RawServer(lambda request: [head, first, 30.0])
    seen = []
    with server.running() as url:
        with pytest.raises(SamplingError, match=r"Timeout: no bytes for 0.3 s"):
            sample(VLLMSampler(url, timeout_s=0.3), on_token=lambda t, lp: seen.append(t))
    assert seen == [7]


def test_a_routing_key_that_would_inject_a_header_is_refused_unsent():
    server = RawServer(lambda request: json_answer(OK))
    with server.running() as url:
        with routing_key("s-1\r\nX-Injected: 1"):
            with pytest.raises(SamplingError, match=r"not sent: header 'X-Session-Id' has a CR, LF or NUL"):
                sample(VLLMSampler(url))
    assert server.requests == []


def test_a_base_url_that_is_not_http_is_a_clear_error():
    with pytest.raises(SamplingError, match=r"not sent: not an http\(s\) URL: 'ftp://x/inference/v1/generate'"):
        sample(VLLMSampler("ftp://x"))


def test_https_with_the_system_trust_store(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what ssl.create_default_context() trusts
    server = RawServer(lambda request: json_answer(OK), tls=tls)
    with server.running() as url:
        assert url.startswith("https://")
        assert sample(VLLMSampler(url)).token_ids == (4,)
    monkeypatch.delenv("SSL_CERT_FILE")
    with RawServer(lambda request: json_answer(OK), tls=tls).running() as url:
        with pytest.raises(SamplingError, match=r"ConnectError: .*CERTIFICATE_VERIFY_FAILED"):
            sample(VLLMSampler(url))


def _params():
    from agentcore_rl_harness.records import SamplingParams

    return SamplingParams()


def _self_signed(folder):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentcore-rl test sampler")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
