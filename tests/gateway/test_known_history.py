"""Messages a session's chat wire already checked are compared, not checked or translated again
(`gateway/known_history.py`): a long session over HTTP gives exactly the prompts and trace of a
from-scratch render, and every check still refuses what it refused before, old messages included."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from agentcore_rl_harness.gateway import openai_wire
from agentcore_rl_harness.gateway.known_history import KnownHistory, plain_chat_message
from agentcore_rl_harness.gateway.messages import WireError, chat_tools, check_history
from agentcore_rl_harness.gateway.openai_routes import chat_request
from agentcore_rl_harness.gateway.routing import ApiError
from agentcore_rl_harness.gateway.sessions import SessionStore
from agentcore_rl_harness.gateway.trajectory import TurnTree
from agentcore_rl_harness.records import FinishReason, SampleResult

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]
TURNS = 60


def reply(index):
    if index % 5 == 4:
        return f"Step {index} is done; what next?"
    return f'<tool_call>\n{{"name": "shell", "arguments": {{"cmd": "make step{index}"}}}}\n</tool_call>'


def tool_output(index):
    return "\n".join(f"[{index}.{line}] cc -O2 -c src/module_{line}.c ok ({index * 7 + line} ms)" for line in range(8))


def play(client, session_id, turns):
    """An agent loop over HTTP: every request re-sends the whole history. Returns what it sent."""
    messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "Fix the build."}]
    sent = []
    for index in range(turns):
        sent.append(json.loads(json.dumps(messages)))
        response = client.post("/chat/completions", headers={"Authorization": f"Bearer {session_id}"},
                               json={"model": "m", "messages": messages, "tools": TOOLS})
        assert response.status_code == 200, response.text
        message = {k: v for k, v in response.json()["choices"][0]["message"].items() if v is not None}
        messages.append(message)
        for call in message.get("tool_calls") or ():
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(index)})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": f"Continue after step {index}."})
    return sent, messages


def from_scratch(renderer, sent, sampler_calls, sampled):
    """The same requests through a turn tree that renders every prompt in full."""
    tree = TurnTree(renderer, incremental=False)
    prompts = []
    for messages, ids in zip(sent, sampled, strict=True):
        plan = tree.plan(openai_wire.to_internal(messages), chat_tools(TOOLS))
        prompts.append(tuple(plan.prompt_token_ids))
        logprobs = tuple(-0.001 * (i + 1) - t * 1e-7 for i, t in enumerate(ids))
        text = renderer.decode(ids[:-1])
        tree.record(plan, SampleResult(ids, logprobs, FinishReason.STOP), renderer.parse_reply(text))
    return prompts, tree.traces()


def test_a_long_session_is_token_for_token_a_from_scratch_render(gateway_factory, renderer, im_end):
    replies = [reply(index) for index in range(TURNS)]
    server, sampler = gateway_factory(replies)
    session_id = server.sessions.open()
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        sent, _ = play(client, session_id, TURNS)
    finished = server.sessions.finish(session_id)
    sampled = [(*renderer.encode(text), im_end) for text in replies]
    prompts, traces = from_scratch(renderer, sent, sampler.calls, sampled)
    for index, (call, prompt) in enumerate(zip(sampler.calls, prompts, strict=True)):
        assert tuple(call.prompt_token_ids) == prompt, f"turn {index}: the prompt differs from a full render"
    (trace,) = finished.traces
    assert finished.traces == traces
    assert finished.metadata["drift_events"] == 0 and finished.metadata["forks"] == 0
    assert len(trace.token_ids) > 20 * TURNS  # the history really grew: ~60 tokens a turn


def _session():
    store = SessionStore(renderer=None)
    return store.get(store.open())


class Context:
    check_history = True


def _history(turns, *, arguments='{"cmd": "ls"}'):
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for index in range(turns):
        call_id = f"call_{index}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": f"out {index}"})
    return messages


def _deep(levels):
    value = []
    for _ in range(levels):
        value = [value]
    return value


def _request(messages):
    return {"model": "m", "messages": json.loads(json.dumps(messages))}  # fresh objects, as parsed


def test_known_messages_are_handed_on_as_the_objects_already_held():
    session = _session()
    first = _history(3)
    _, internal = chat_request(Context(), session, _request(first))
    _, again = chat_request(Context(), session, _request(_history(4)))
    assert again == openai_wire.to_internal(_history(4))
    assert all(a is b for a, b in zip(again, internal[:len(first)]))  # one copy of the history
    assert session.known_history.match("chat", _history(4)).count == len(_history(4)) - 1


@pytest.mark.parametrize("where, break_it, words", [
    ("new", lambda m: m[-1].update(tool_call_id="call_x"), "'call_x' answers no tool call"),
    ("old", lambda m: m[3].update(tool_call_id="call_x"), "'call_x' answers no tool call"),
    ("old", lambda m: m[2].update(tool_calls="x"), "messages[2].tool_calls"),
    ("new", lambda m: m[-2].update(tool_calls=[5]), "messages[8].tool_calls[0]"),
    ("new", lambda m: m.append({"role": "wizard", "content": "hi"}), "messages[10]"),
    ("old", lambda m: m[1].update(content=[{"type": "image_url"}]), "messages[1]: content part of type 'image_url'"),
    ("new", lambda m: m[-1].update(content=_deep(80)), "nested deeper"),
])
def test_every_check_still_refuses_old_and_new_messages(where, break_it, words):
    """After three good turns, a request breaking a message the session already knows (then it is
    not known any more) or a new one is refused with the same words and indices as on a fresh
    session; the session then serves the next good request from what it knows."""
    session, fresh = _session(), _session()
    for turns in (1, 2, 3):
        chat_request(Context(), session, _request(_history(turns)))
    bad = _request(_history(4))
    break_it(bad["messages"])
    errors = []
    for target in (session, fresh):
        with pytest.raises((ApiError, WireError)) as caught:
            chat_request(Context(), target, json.loads(json.dumps(bad)))
        errors.append(str(caught.value))
    assert words in errors[0] and errors[0] == errors[1]
    _, internal = chat_request(Context(), session, _request(_history(4)))
    assert internal == openai_wire.to_internal(_history(4))


def test_arguments_equal_only_as_python_values_are_translated_anew():
    """{"n": 1} == {"n": True} in Python, not in JSON: such a message is never taken as known."""
    session = _session()
    chat_request(Context(), session, _request(_history(2, arguments={"n": 1})))
    _, internal = chat_request(Context(), session, _request(_history(3, arguments={"n": True})))
    assert [m["tool_calls"][0]["function"]["arguments"] for m in internal if m["role"] == "assistant"] == \
        ['{"n": true}'] * 3
    assert not plain_chat_message(_history(1, arguments={"n": 1})[2])


def test_known_history_keeps_the_latest_requests_and_matches_the_longest():
    known = KnownHistory(kept=2)
    for count in (5, 3, 4):
        raw = list(range(count))
        known.remember("chat", known.match("chat", raw), raw, [f"m{i}" for i in raw], lambda m: True)
    assert known.match("chat", list(range(9))).count == 4  # 5 was pushed out by the two after it
    assert known.match("chat", [0, 1, 2, 3]).count == 3  # the last message is always checked again
    assert known.match("chat", [0, 9, 2, 3, 4]).count == 0
    assert known.match("other wire", list(range(9))).count == 0
    with pytest.raises(ValueError, match="one to one"):
        known.remember("chat", known.match("chat", [0]), [0, 1], ["m0"], lambda m: True)


def test_resuming_the_history_check_decides_as_the_whole_check():
    """`check_history(checked=k)` refuses exactly what the whole check refuses, for every split
    of every short sequence whose first k messages pass on their own."""
    pool = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]},
        {"role": "tool", "tool_call_id": "a", "content": ""},
        {"role": "tool", "tool_call_id": "b", "content": ""},
    ]

    def refused(messages, **kwargs):
        try:
            check_history(messages, result="r", **kwargs)
        except WireError:
            return True
        return False

    for length in range(1, 6):
        for messages in itertools.product(pool, repeat=length):
            whole = refused(messages)
            for checked in range(length + 1):
                if not refused(messages[:checked]):
                    assert refused(messages, checked=checked) == whole, (messages, checked)


# --- known bytes: the body parsed without the messages it re-sends byte for byte ---------------

STYLES = {
    "json.dumps": lambda value: json.dumps(value),
    "compact": lambda value: json.dumps(value, separators=(",", ":")),
    "indented, utf-8": lambda value: json.dumps(value, indent=1, ensure_ascii=False),
}
TRICKY = ['he said "]}," and left', "back\\slash ]", "tab\tnew\nline", "é ü 中文 🚀", "[{\"messages\": []}]", ""]


def _conversation(seed, turns):
    """Requests of a made-up agent: tool calls (string and object arguments, ints and booleans),
    tool results, user turns, text parts and extra keys, with strings that look like JSON."""
    import random

    rng = random.Random(seed)
    messages = [{"role": "system", "content": "s " + rng.choice(TRICKY)}, {"role": "user", "content": "go"}]
    for index in range(turns):
        yield list(messages)
        if rng.random() < 0.6:
            call_id = f"call_{seed}_{index}"
            arguments = rng.choice([json.dumps({"cmd": rng.choice(TRICKY)}), {"n": rng.choice([1, True, 1.0])}])
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": "shell",
                             "content": rng.choice([rng.choice(TRICKY), [{"type": "text", "text": rng.choice(TRICKY)}]])})
        else:
            messages.append({"role": "assistant", "content": rng.choice(TRICKY)})
            messages.append({"role": "user", "content": f"more {index}"})


def _body(messages, style, *, head=True):
    extra = {"model": "m", "temperature": 0.5}
    value = {**extra, "messages": messages, "tools": TOOLS} if head else {"messages": messages, "tools": TOOLS, **extra}
    return STYLES[style](value).encode()


def _same(got, want):
    (got_body, got_internal), (want_body, want_internal) = got, want
    assert got_internal == want_internal
    assert got_body.model_dump(exclude={"messages"}) == want_body.model_dump(exclude={"messages"})


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("seed", range(4))
def test_known_bytes_give_what_a_whole_parse_gives(style, seed):
    """Request after request of a conversation as bytes: the session that splits off what it
    knows gets exactly the validated request and messages a fresh session gets, and it did split
    (after the first request) unless a message holds object arguments in a style it cannot take
    apart (none here)."""
    session = _session()
    split = 0
    for index, messages in enumerate(_conversation(seed, 25)):
        body = _body(messages, style, head=index % 7 != 3)  # now and then the keys move: no split
        split += session.known_history.split("chat", body) is not None
        _same(chat_request(Context(), session, body), chat_request(Context(), _session(), body))
    assert split >= 25 - 1 - 2 * 4  # each moved head costs its request and the next


BAD_NEW = [
    ({"role": "tool", "tool_call_id": "nope", "content": "x"}, "answers no tool call"),
    ({"role": "assistant", "content": None, "tool_calls": "x"}, "tool_calls"),
    ({"role": "user", "content": [{"type": "image_url"}]}, "content part of type 'image_url'"),
    ({"role": "user", "content": _deep(70)}, "nested deeper"),
]


@pytest.mark.parametrize("message, words", BAD_NEW)
def test_a_bad_message_after_known_bytes_is_refused_as_a_fresh_session_refuses_it(message, words):
    session = _session()
    for messages in _conversation(7, 6):
        chat_request(Context(), session, _body(messages, "json.dumps"))
    bad = _body([*messages, message], "json.dumps")
    assert session.known_history.split("chat", bad) is not None
    errors = []
    for target in (session, _session()):
        with pytest.raises((ApiError, WireError)) as caught:
            chat_request(Context(), target, bad)
        errors.append(str(caught.value))
    assert words in errors[0] and errors[0] == errors[1]


@pytest.mark.parametrize("ending, words", [
    (b', "messages": [{"role": "user", "content": "other"}]}', None),  # the last `messages` wins
    (b', "messag\\u0065s": [{"role": "user", "content": "other"}]}', None),
    (b', "temperature": NaN}', None),  # only the standard parser reads it
    (b'} trailing', "not valid JSON"),
    (b', "messages": }', "not valid JSON"),
])
def test_bodies_that_are_not_taken_apart_are_parsed_whole(ending, words):
    """Known bytes followed by a second `messages` key (escaped or not), by what only the standard
    parser reads, or by broken JSON: the request is decided as a fresh session decides it."""
    session = _session()
    for messages in _conversation(3, 5):
        chat_request(Context(), session, _body(messages, "json.dumps", head=False))
    messages = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    body = _body(messages, "json.dumps", head=False)
    assert body.endswith(b"}")
    body = body[:-1] + ending
    outcomes = []
    for target in (session, _session()):
        try:
            outcomes.append(chat_request(Context(), target, body))
        except (ApiError, WireError) as exc:
            outcomes.append(str(exc))
    if words is None:
        _same(*outcomes)
    else:
        assert words in outcomes[0] and outcomes[0] == outcomes[1]


def test_a_client_that_never_resends_the_same_bytes_is_scanned_three_times_only(monkeypatch):
    """Key order changing with every request: no body starts with kept bytes, so after three
    whole-body scans nobody used the session stops scanning (each costs Python-speed time), and
    its requests still come out as a fresh session's."""
    from agentcore_rl_harness.gateway import known_history

    scans = []
    layout = known_history._layout
    monkeypatch.setattr(known_history, "_layout", lambda body, *rest: scans.append(rest) or layout(body, *rest))
    session, session_scans = _session(), 0
    for index, messages in enumerate(_conversation(11, 12)):
        extra = {"model": "m", "temperature": 0.5, "tools": TOOLS}
        keys = [*extra][index % 3:] + [*extra][:index % 3]  # heads of 0, 1, 2 keys in turn
        body = json.dumps({**{key: extra[key] for key in keys[:index % 3]}, "messages": messages,
                           **{key: extra[key] for key in keys[index % 3:]}}).encode()
        before = len(scans)
        got = chat_request(Context(), session, body)
        session_scans += len(scans) - before
        _same(got, chat_request(Context(), _session(), body))
    assert session_scans == 3
