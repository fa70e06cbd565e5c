"""Sessions that last hours: turn cap, idle TTL from last activity, lifetime, and what the rollout
records about the limit a session hit. Timed with a fake clock handed to the real server."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.gateway import GatewayConfig, SessionStore
from agentcore_rl_harness.gateway.sessions import SessionExpiredError, SessionLimits, TurnStart
from agentcore_rl_harness.records import SamplingParams

HI = [{"role": "user", "content": "hi"}]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _client(server, session_id):
    return openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)


def test_defaults_fit_an_eight_hour_session():
    limits = SessionLimits()
    assert limits.max_lifetime_s > 8 * 3600 and 900 <= limits.idle_ttl_s <= 1800
    assert limits.max_turns >= 1000 and limits.context_budget_tokens is None
    config = GatewayConfig()
    assert config.limits() == limits


@pytest.mark.slow
def test_a_session_of_500_turns_through_the_openai_client(gateway_factory, check_trace):
    turns = 500
    replies = [f"step {i} done" for i in range(turns)]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    client = _client(server, session_id)
    messages = [{"role": "system", "content": "You are a long-running agent."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"observation {i}: all green"})
        reply = client.chat.completions.create(model="m", messages=messages)
        assert reply.choices[0].message.content == replies[i]
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    finished = server.sessions.finish(session_id)
    assert finished.turns == turns and finished.metadata["limits_hit"] == []
    assert finished.metadata["forks"] == 0 and finished.metadata["drift_events"] == 0
    (trace,) = finished.traces
    check_trace(trace, sampler.calls, replies)
    assert "limits_hit" not in trace.metadata


def test_activity_keeps_a_session_alive_past_its_idle_ttl(gateway_factory):
    clock = FakeClock()
    server, sampler = gateway_factory([f"r{i}" for i in range(6)], clock=clock,
                                      config=GatewayConfig(idle_ttl_s=60, max_lifetime_s=None))
    session_id = server.sessions.open()
    client = _client(server, session_id)
    for _ in range(5):  # 5 x 50 s = 250 s, four times the idle TTL, never idle 60 s
        clock.now += 50
        client.chat.completions.create(model="m", messages=HI)
        assert server.sessions.reap_expired() == []
    clock.now += 59.9
    assert server.sessions.reap_expired() == []
    finished = server.sessions.finish(session_id)
    assert finished.turns == 5 and not finished.metadata["reaped"] and finished.metadata["limits_hit"] == []


def test_an_idle_session_expires_with_a_clear_error_on_every_wire(gateway_factory):
    clock = FakeClock()
    server, _ = gateway_factory(["only"], clock=clock, config=GatewayConfig(idle_ttl_s=60))
    session_id = server.sessions.open()
    client = _client(server, session_id)
    client.chat.completions.create(model="m", messages=HI)
    clock.now += 60
    with pytest.raises(openai.AuthenticationError, match="made no request for 60 s") as caught:
        client.chat.completions.create(model="m", messages=HI)
    assert caught.value.code == "session_expired" and "gateway.idle_ttl_s" in caught.value.message
    claude = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError, match="made no request"):
        claude.messages.create(model="m", max_tokens=5, messages=HI)
    (reaped,) = server.sessions.reaped()
    finished = server.sessions.finish(session_id)
    assert finished is reaped and finished.turns == 1 and finished.metadata["reaped"]
    assert finished.metadata["limits_hit"] == ["idle_ttl_s"]
    (trace,) = finished.traces
    assert trace.metadata["limits_hit"] == ["idle_ttl_s"]  # what the rollout record carries


def test_the_lifetime_caps_even_a_busy_session(gateway_factory):
    clock = FakeClock()
    server, _ = gateway_factory(["a", "b", "c"], clock=clock,
                                config=GatewayConfig(idle_ttl_s=60, max_lifetime_s=100))
    session_id = server.sessions.open()
    client = _client(server, session_id)
    for _ in range(2):
        clock.now += 45
        client.chat.completions.create(model="m", messages=HI)
    clock.now += 10  # 100 s after opening, 10 s after the last request
    with pytest.raises(openai.AuthenticationError, match="reached its lifetime of 100 s"):
        client.chat.completions.create(model="m", messages=HI)
    finished = server.sessions.finish(session_id)
    assert finished.turns == 2 and finished.metadata["limits_hit"] == ["max_lifetime_s"]
    assert all(t.metadata["limits_hit"] == ["max_lifetime_s"] for t in finished.traces)


def test_the_server_reaper_expires_idle_sessions_on_the_injected_clock(gateway_factory):
    clock = FakeClock()
    server, _ = gateway_factory([], clock=clock, config=GatewayConfig(idle_ttl_s=60, reap_interval_s=0.02))
    idle, busy = server.sessions.open(), server.sessions.open()
    clock.now += 30
    server.sessions.get(busy).plan(HI, None)  # a request: activity
    clock.now += 31
    deadline = time.monotonic() + 5
    while not server.sessions.reaped() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [f.session_id for f in server.sessions.reaped()] == [idle]
    assert server.sessions.get(busy) is not None


def test_a_turn_being_sampled_is_recorded_before_its_expired_session_is_reaped(renderer):
    clock = FakeClock()
    store = SessionStore(renderer=renderer, limits=SessionLimits(idle_ttl_s=10, max_lifetime_s=20), clock=clock)
    session_id = store.open()
    session = store.get(session_id)
    session.start_turn(TurnStart())
    clock.now += 15  # sampling for 15 s: not idle
    assert store.reap_expired() == [] and store.get(session_id) is session
    clock.now += 10  # past the lifetime: new requests are refused, the running turn is not
    assert store.reap_expired() == []
    with pytest.raises(SessionExpiredError, match="lifetime of 20 s"):
        store.get(session_id)
    session.end_turn()
    (reaped,) = store.reap_expired()
    assert reaped.metadata["turns_in_flight_at_finish"] == 0
    assert reaped.metadata["limits_hit"] == ["max_lifetime_s"]


def test_finish_collects_an_expired_session_that_was_not_reaped_yet(renderer):
    clock = FakeClock()
    store = SessionStore(renderer=renderer, limits=SessionLimits(idle_ttl_s=10), clock=clock)
    session_id = store.open()
    clock.now += 11
    finished = store.finish(session_id)
    assert finished.session_id == session_id and not finished.metadata["reaped"]


def test_turn_cap_and_context_budget_are_recorded_in_the_traces(gateway_factory, renderer):
    prompt_tokens = len(renderer.encode(renderer.render(HI)))
    config = GatewayConfig(max_turns=2, context_budget_tokens=prompt_tokens + 2)
    server, _ = gateway_factory(["a reply longer than the budget", "x"], config=config,
                                sampling=SamplingParams(max_tokens=50))
    session_id = server.sessions.open()
    client = _client(server, session_id)
    client.chat.completions.create(model="m", messages=HI)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "another root"}])
    with pytest.raises(openai.RateLimitError, match="gateway.max_turns"):
        client.chat.completions.create(model="m", messages=HI)
    finished = server.sessions.finish(session_id)
    assert finished.metadata["limits_hit"] == ["max_turns", "context_budget_tokens"]
    assert all(t.metadata["limits_hit"] == ["max_turns", "context_budget_tokens"] for t in finished.traces)


@pytest.mark.parametrize("limits", [SessionLimits(max_turns=0), SessionLimits(idle_ttl_s=-1.0)])
def test_non_positive_limits_are_config_errors(renderer, limits):
    with pytest.raises(ConfigError, match="must be > 0, or null for no limit"):
        SessionStore(renderer=renderer, limits=limits)


def test_a_turn_start_reaches_its_session_in_one_locked_call(renderer):
    """`prepare_turn` tells the session of a turn twice (its plan, then one `TurnStart`), however
    much the turn has to report: here an ignored override, a clamped and an exhausted budget;
    what it reports is all counted."""
    from agentcore_rl_harness.gateway.turn import RequestedSampling, prepare_turn

    class CountingLock:
        def __init__(self, lock):
            self.lock, self.taken = lock, 0

        def __enter__(self):
            self.taken += 1
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    prompt = len(renderer.render_ids(HI))
    store = SessionStore(renderer=renderer, limits=SessionLimits(context_budget_tokens=prompt + 3))
    session = store.get(store.open(sampling=SamplingParams(max_tokens=16)))
    session._lock = lock = CountingLock(session._lock)
    for budget_left in (3, 0):
        session.limits = SessionLimits(context_budget_tokens=prompt + budget_left)
        taken = lock.taken
        prepared = prepare_turn(session=session, renderer=renderer, messages=HI, tools=None,
                                requested=RequestedSampling(temperature=0.123))
        assert lock.taken - taken == 2
        assert prepared.params.max_tokens == (3 if budget_left else 16) and prepared.exhausted == (not budget_left)
        session.end_turn()
    finished = session.close()
    assert finished.metadata["sampling_overrides"] == {"temperature": 2}
    assert finished.metadata["limits_hit"] == ["context_budget_tokens"]
    assert finished.metadata["context_budget_exhausted"] == 1
