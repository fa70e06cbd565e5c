"""Session lifecycle over HTTP: idle-TTL reaping, turn cap 429, context budget, disconnect mid-stream."""

from __future__ import annotations

import asyncio
import threading
import time

import anthropic
import httpx
import openai
import pytest

from agentcore_rl_harness.gateway import GatewayConfig, SessionStore
from agentcore_rl_harness.gateway.sessions import SessionClosedError, SessionLimits
from agentcore_rl_harness.records import SamplingParams

HI = [{"role": "user", "content": "hi"}]


def test_ttl_reaping_keeps_traces_and_refuses_the_key(gateway_factory):
    server, _ = gateway_factory(["warm-up", "first reply"],
                                config=GatewayConfig(idle_ttl_s=1.0, reap_interval_s=0.05))
    # the openai client's first call imports its types (seconds on a loaded machine): pay that on
    # a session finished at once, so the one under test reaches its first request inside the TTL
    warm = server.sessions.open()
    openai.OpenAI(base_url=server.base_url, api_key=warm, max_retries=0).chat.completions.create(
        model="m", messages=HI)
    server.sessions.finish(warm)
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    client.chat.completions.create(model="m", messages=HI)
    deadline = time.monotonic() + 5
    while not server.sessions.reaped() and time.monotonic() < deadline:
        time.sleep(0.02)
    (reaped,) = server.sessions.reaped()
    assert reaped.session_id == session_id and reaped.metadata["reaped"] is True and reaped.turns == 1
    assert reaped.metadata["limits_hit"] == ["idle_ttl_s"]
    with pytest.raises(openai.AuthenticationError, match="made no request for 1 s"):
        client.chat.completions.create(model="m", messages=HI)
    finished = server.sessions.finish(session_id)
    assert finished is reaped and len(finished.traces) == 1 and server.sessions.reaped() == ()
    with pytest.raises(SessionClosedError):
        server.sessions.finish(session_id)


def test_reap_expired_uses_the_store_clock(renderer):
    now = [100.0]
    store = SessionStore(renderer=renderer, limits=SessionLimits(max_lifetime_s=10), clock=lambda: now[0])
    old = store.open()
    now[0] = 105.0
    young = store.open()
    now[0] = 110.0
    assert [f.session_id for f in store.reap_expired()] == [old]
    assert store.get(young) and len(store) == 1
    store.delete(old)
    assert store.reaped() == ()


def test_turn_cap_is_429_on_every_wire(gateway_factory):
    server, sampler = gateway_factory(["one", "two", "three"], config=GatewayConfig(max_turns=2))
    session_id = server.sessions.open()
    chat = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    chat.chat.completions.create(model="m", messages=HI)
    chat.responses.create(model="m", input="hi")
    with pytest.raises(openai.RateLimitError, match="limit of 2 turns"):
        chat.chat.completions.create(model="m", messages=HI)
    with pytest.raises(openai.RateLimitError):
        chat.responses.create(model="m", input="hi", stream=True)
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as caught:
        claude.messages.create(model="m", max_tokens=5, messages=HI)
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert len(sampler.calls) == 2 and server.sessions.finish(session_id).turns == 2


def test_context_budget_lowers_max_tokens_then_ends_turns_without_sampling(gateway_factory, renderer):
    prompt_tokens = len(renderer.encode(renderer.render(HI)))
    budget = prompt_tokens + 3
    config = GatewayConfig(context_budget_tokens=budget)
    server, sampler = gateway_factory(["a long reply that does not fit"], config=config,
                                      sampling=SamplingParams(max_tokens=50))
    session_id = server.sessions.open()
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    first = client.chat.completions.create(model="m", messages=HI)
    assert sampler.calls[0].params.max_tokens == 3 and first.choices[0].finish_reason == "length"
    history = [*HI, first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    second = client.chat.completions.create(model="m", messages=history)
    assert second.choices[0].finish_reason == "length" and second.choices[0].message.content == ""
    assert second.usage.completion_tokens == 0 and len(sampler.calls) == 1
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    with claude.messages.stream(model="m", max_tokens=5, messages=history) as stream:
        assert stream.get_final_message().stop_reason == "max_tokens"
    finished = server.sessions.finish(session_id)
    assert finished.turns == 1 and finished.metadata["context_budget_exhausted"] == 2
    (trace,) = finished.traces
    assert len(trace.token_ids) == budget


def test_oversized_body_is_413_on_every_wire(gateway_factory):
    server, _ = gateway_factory([], config=GatewayConfig(max_body_bytes=512))
    headers = {"Authorization": f"Bearer {server.sessions.open()}"}
    for path in ("/chat/completions", "/responses", "/messages", "/messages/count_tokens"):
        response = httpx.post(server.base_url + path, headers=headers,
                              json={"messages": [{"role": "user", "content": "x" * 1024}], "input": "x"})
        assert response.status_code == 413, path
        assert "limit of 512 bytes" in str(response.json())


@pytest.mark.asyncio
async def test_client_disconnect_mid_stream_still_records_the_whole_sample(gateway_factory, renderer, im_end):
    reply = "one two three four five six seven eight nine ten"
    release = threading.Event()

    class SlowSampler:
        """Streams the first tokens, then waits until the test has disconnected."""

        def __init__(self):
            self.calls = 0

        async def sample(self, *, prompt_token_ids, params, on_token=None):
            from agentcore_rl_harness.records import FinishReason, SampleResult

            self.calls += 1
            ids = [*renderer.encode(reply), im_end]
            for position, token_id in enumerate(ids):
                while position == 3 and not release.is_set():
                    await asyncio.sleep(0.01)
                if on_token is not None:
                    on_token(token_id, -0.5)
            return SampleResult(tuple(ids), (-0.5,) * len(ids), FinishReason.STOP)

    server, _ = gateway_factory([], sampler=SlowSampler())
    session_id = server.sessions.open()
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        async with client.stream("POST", "/chat/completions", headers={"Authorization": f"Bearer {session_id}"},
                                 json={"messages": HI, "stream": True}) as response:
            async for line in response.aiter_lines():
                if '"content": "one' in line or '"content": " two' in line:
                    break
    release.set()  # the client is gone; let the sample complete
    # Both happen after the client left, in either order (the sample's task records the turn; the
    # server closing the response generator counts the disconnect): wait for both, not just one.
    session = server.sessions.get(session_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if session.turn_count and session.event_count("client_disconnects"):
            break
        await asyncio.sleep(0.02)
    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    assert list(trace.token_ids[trace.prompt_length:]) == [*renderer.encode(reply), im_end]
    assert all(trace.loss_mask) and finished.metadata["client_disconnects"] == 1


def test_sampler_failures_are_counted_as_gateway_errors(gateway_factory):
    """A failing sampler is the gateway's fault: 502 to the agent, counted in the metadata."""
    import openai

    from agentcore_rl_harness.errors import SamplingError

    class Broken:
        async def sample(self, *, prompt_token_ids, params, on_token=None):
            raise SamplingError("the engine is down")

    gateway, _ = gateway_factory([], sampler=Broken())
    session_id = gateway.sessions.open()
    client = openai.OpenAI(base_url=gateway.base_url, api_key=session_id, max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502
    assert gateway.sessions.finish(session_id).metadata["gateway_errors"] == 1


def test_a_client_gone_before_its_body_arrived_is_a_disconnect_not_a_gateway_error(gateway_factory, caplog):
    """Headers and half a body, then the socket closes: nothing sampled or recorded, no 500 logged,
    the session counts `client_disconnects` (not `gateway_errors`) and serves the next request."""
    import socket
    from urllib.parse import urlsplit

    server, sampler = gateway_factory(["fine"])
    session_id = server.sessions.open()
    url = urlsplit(server.base_url)
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {session_id}"
                     "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\": [".encode())
        time.sleep(0.2)  # the handler is reading the body
    session = server.sessions.get(session_id)
    deadline = time.monotonic() + 10
    while not session.event_count("client_disconnects") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert session.event_count("client_disconnects") == 1
    assert session.event_count("gateway_errors") == 0 and session.turn_count == 0 and not sampler.calls
    assert "internal gateway error" not in caplog.text
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    assert client.chat.completions.create(model="m", messages=HI).choices[0].message.content == "fine"
