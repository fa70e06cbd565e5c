"""`SessionStore`: unguessable keys, finish closes, delete forgets, safe across threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentcore_rl_harness.gateway.sessions import (
    SessionClosedError,
    SessionError,
    SessionExistsError,
    SessionStore,
    UnknownSessionError,
)
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.gateway.sampling import current_routing_key
from agentcore_rl_harness.gateway.turn import RequestedSampling, effective_sampling, run_turn
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.samplers.scripted import ScriptedSampler


def test_open_generates_unguessable_distinct_ids(renderer):
    store = SessionStore(renderer=renderer)
    ids = {store.open() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) >= 33 for i in ids)
    assert store.open(session_id="my-session") == "my-session"
    with pytest.raises(SessionExistsError):
        store.open(session_id="my-session")
    with pytest.raises(SessionError, match="not usable"):
        store.open(session_id="has space")


def test_finish_closes_and_delete_forgets(renderer):
    store = SessionStore(renderer=renderer, default_sampling=SamplingParams(max_tokens=9))
    session_id = store.open()
    assert store.get(session_id).sampling.max_tokens == 9
    finished = store.finish(session_id)
    assert finished.traces == () and finished.turns == 0 and finished.session_id == session_id
    with pytest.raises(SessionClosedError):
        store.get(session_id)
    with pytest.raises(SessionClosedError):
        store.finish(session_id)
    store.delete(session_id)
    with pytest.raises(UnknownSessionError):
        store.get(session_id)
    with pytest.raises(UnknownSessionError):
        store.delete(session_id)


def test_finished_keys_are_remembered_for_a_while_then_forgotten(renderer, monkeypatch):
    """A finished key is refused as finished for FINISHED_KEYS_KEPT_S, then as unknown: the
    store's memory stays bounded however many sessions a long-lived gateway serves."""
    from agentcore_rl_harness.gateway import sessions as sessions_module

    now = [1000.0]
    store = SessionStore(renderer=renderer, clock=lambda: now[0])
    early = store.open()
    store.finish(early)
    now[0] += sessions_module.FINISHED_KEYS_KEPT_S - 1
    with pytest.raises(SessionClosedError):
        store.get(early)
    with pytest.raises(SessionExistsError):
        store.open(session_id=early)
    now[0] += 2
    store.finish(store.open())  # each finish prunes what is past the window
    with pytest.raises(UnknownSessionError):
        store.get(early)
    monkeypatch.setattr(sessions_module, "MAX_FINISHED_KEYS", 100)
    store = SessionStore(renderer=renderer, clock=lambda: now[0])
    finished = []
    for _ in range(250):
        finished.append(store.open())
        store.finish(finished[-1])
    with pytest.raises(UnknownSessionError):
        store.get(finished[0])
    with pytest.raises(SessionClosedError):
        store.get(finished[-1])


def test_turn_on_a_deleted_session_is_refused(renderer):
    store = SessionStore(renderer=renderer)
    session = store.get(store.open())
    store.delete(session.session_id)
    with pytest.raises(SessionClosedError):
        session.plan([{"role": "user", "content": "hi"}], None)


def test_concurrent_turns_from_threads_are_all_recorded(renderer):
    store = SessionStore(renderer=renderer)
    session_id = store.open()
    sampler = ScriptedSampler(lambda prompt, params: "ok", encode=renderer.encode)

    def agent(index):
        asyncio.run(run_turn(session=store.get(session_id), sampler=sampler, renderer=renderer,
                             messages=[{"role": "user", "content": f"q{index}"}], tools=None,
                             requested=RequestedSampling()))

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = store.finish(session_id)
    assert finished.turns == 8 and len(finished.traces) == 8 and finished.metadata["forks"] == 7


def test_effective_sampling_only_lets_the_agent_lower_max_tokens():
    session = SamplingParams(temperature=0.5, max_tokens=10, stop_token_ids=(7,))
    params, overrides = effective_sampling(session, RequestedSampling(temperature=0.5, max_tokens=4), (2,))
    assert params == SamplingParams(temperature=0.5, max_tokens=4, stop_token_ids=(2, 7)) and overrides == []
    params, overrides = effective_sampling(
        session, RequestedSampling(temperature=1.0, top_p=0.5, top_k=3, seed=1, max_tokens=99, stop=("x",)), (2,))
    assert params.max_tokens == 10 and params.temperature == 0.5
    assert sorted(overrides) == ["max_tokens", "seed", "stop", "temperature", "top_k", "top_p"]


def test_each_turn_samples_under_its_session_routing_key(renderer):
    store = SessionStore(renderer=renderer)
    keys = []

    def reply(prompt, params):
        keys.append(current_routing_key())
        return "ok"

    sampler = ScriptedSampler(reply, encode=renderer.encode)
    for session_id in (store.open(), store.open()):
        asyncio.run(run_turn(session=store.get(session_id), sampler=sampler, renderer=renderer,
                             messages=[{"role": "user", "content": "q"}], tools=None, requested=RequestedSampling()))
        assert keys[-1] == session_id
    assert current_routing_key() is None


def test_history_mode_is_a_store_setting(renderer):
    store = SessionStore(renderer=renderer, history="template")
    assert store.history == "template" and store.get(store.open())._tree.history == "template"
    assert SessionStore(renderer=renderer).history == "exact"
    with pytest.raises(ConfigError, match="history='sometimes'"):
        SessionStore(renderer=renderer, history="sometimes")
