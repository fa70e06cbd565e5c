"""Every wire takes the known-history path (`gateway/turn_routes.py`, `known_history.py`): an
Anthropic Messages or Responses session translates only its new messages each turn, however long
its history, gives token for token the prompts and trace of a from-scratch render, and forks and
counts drift exactly as the chat wire does when the agent changes its history."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from agentcore_rl_harness.gateway import anthropic_routes, anthropic_wire, openai_routes, openai_wire
from agentcore_rl_harness.gateway import responses_routes, responses_wire
from agentcore_rl_harness.gateway.messages import chat_tools
from agentcore_rl_harness.gateway.sessions import SessionStore
from agentcore_rl_harness.gateway.trajectory import TurnTree
from agentcore_rl_harness.gateway import turn_routes
from agentcore_rl_harness.gateway.turn_routes import read_turn_request
from agentcore_rl_harness.records import FinishReason, SampleResult

SYSTEM, TASK = "You fix builds.", "Fix the build."
PARAMETERS = {"type": "object", "properties": {"cmd": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": PARAMETERS}}]
WIRES = ("chat", "anthropic", "responses")
turn_routes_validated = turn_routes.validated
# the module global each route reads its wire description from, per wire
ROUTE_WIRE = {"chat": (openai_routes, "CHAT"), "anthropic": (anthropic_routes, "MESSAGES"),
              "responses": (responses_routes, "RESPONSES")}


def reply(index):
    if index % 5 == 4:
        return f"Step {index} is done; what next?"
    return f'<tool_call>\n{{"name": "shell", "arguments": {{"cmd": "make step{index}"}}}}\n</tool_call>'


def tool_output(index):
    return "\n".join(f"[{index}.{line}] cc -O2 -c src/module_{line}.c ok" for line in range(4))


class Agent:
    """An agent loop on one wire that re-sends its whole history each turn, as the SDKs do."""

    def __init__(self, wire, client, session_id, *, reorder=False):
        self.wire, self.client, self.session_id, self.reorder = wire, client, session_id, reorder
        self.history = {"chat": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}],
                        "anthropic": [{"role": "user", "content": TASK}],
                        "responses": [{"type": "message", "role": "user", "content": TASK}]}[wire]
        self.sent = []

    def body(self, turn):
        if self.wire == "chat":
            body = {"model": "m", "messages": self.history, "tools": TOOLS}
        elif self.wire == "anthropic":
            body = {"model": "m", "max_tokens": 200, "system": SYSTEM, "messages": self.history,
                    "tools": [{"name": "shell", "input_schema": PARAMETERS}]}
        else:
            body = {"model": "m", "instructions": SYSTEM, "input": self.history,
                    "tools": [{"type": "function", "name": "shell", "parameters": PARAMETERS}]}
        if self.reorder:  # keys in another order every turn: no body starts with the last one's bytes
            keys = list(body)[turn % 3:] + list(body)[:turn % 3]
            body = {key: body[key] for key in keys}
        return body

    def turn(self, index):
        body = self.body(index)
        self.sent.append(json.loads(json.dumps(body)))
        path = {"chat": "/chat/completions", "anthropic": "/messages", "responses": "/responses"}[self.wire]
        response = self.client.post(path, headers={"Authorization": f"Bearer {self.session_id}"}, json=body)
        assert response.status_code == 200, response.text
        answer, output = response.json(), tool_output(index)
        if self.wire == "chat":
            message = {k: v for k, v in answer["choices"][0]["message"].items() if v is not None}
            self.history.append(message)
            new = [{"role": "tool", "tool_call_id": call["id"], "content": output}
                   for call in message.get("tool_calls") or ()]
            self.history += new or [{"role": "user", "content": f"Continue after step {index}."}]
        elif self.wire == "anthropic":
            self.history.append({"role": "assistant", "content": answer["content"]})
            results = [{"type": "tool_result", "tool_use_id": block["id"], "content": output}
                       for block in answer["content"] if block["type"] == "tool_use"]
            self.history.append({"role": "user", "content": results or f"Continue after step {index}."})
            if index % 7 == 6:  # a system turn inside `messages`, as Claude Code sends
                self.history.append({"role": "system", "content": f"Step {index} is checked."})
        else:
            self.history += answer["output"]
            outputs = [{"type": "function_call_output", "call_id": item["call_id"], "output": output}
                       for item in answer["output"] if item["type"] == "function_call"]
            self.history += outputs or [{"type": "message", "role": "user",
                                         "content": f"Continue after step {index}."}]

    def edit_first_tool_output(self):
        """The agent rewrites the first tool output it sent (e.g. it truncated a long log)."""
        if self.wire == "chat":
            self.history[3] = {**self.history[3], "content": "(truncated)"}
        elif self.wire == "anthropic":
            self.history[2] = {"role": "user", "content": [{**self.history[2]["content"][0], "content": "(truncated)"}]}
        else:
            self.history[2] = {**self.history[2], "output": "(truncated)"}


def internal_of(wire, body):
    """A request's internal messages and tools, translated from scratch."""
    if wire == "chat":
        return openai_wire.to_internal(body["messages"]), chat_tools(body["tools"])
    if wire == "anthropic":
        return (anthropic_wire.to_internal(body["system"], body["messages"]),
                anthropic_wire.tools_to_internal(body["tools"]))
    return (responses_wire.to_internal(body["input"], body["instructions"]),
            responses_wire.tools_to_internal(body["tools"]))


def from_scratch(wire, renderer, sent, replies, im_end):
    """The same requests through a turn tree that renders every prompt in full."""
    tree = TurnTree(renderer, incremental=False)
    prompts = []
    for body, text in zip(sent, replies, strict=True):
        plan = tree.plan(*internal_of(wire, body))
        prompts.append(tuple(plan.prompt_token_ids))
        ids = (*renderer.encode(text), im_end)
        logprobs = tuple(-0.001 * (i + 1) - t * 1e-7 for i, t in enumerate(ids))
        tree.record(plan, SampleResult(ids, logprobs, FinishReason.STOP), renderer.parse_reply(text))
    return prompts, tree.traces()


def counting(monkeypatch, wire, validations=None):
    """Per request, how many of its messages (items) the wire translated; and in `validations`,
    how many its request model validated (shape-checked)."""
    module, name = ROUTE_WIRE[wire]
    described, counts = getattr(module, name), []

    def translate(messages, start):
        counts.append(len(messages) if isinstance(messages, list) else 1)
        return described.translate(messages, start)

    def validated(model, data):
        if validations is not None and model is described.model:
            validations.append(len(data[described.key]) if isinstance(data.get(described.key), list) else 1)
        return turn_routes_validated(model, data)

    monkeypatch.setattr(module, name, dataclasses.replace(described, translate=translate))
    monkeypatch.setattr(turn_routes, "validated", validated)
    return counts


def play(gateway_factory, monkeypatch, wire, turns, *, reorder=False, edit_at=None, validations=None):
    replies = [reply(index) for index in range(turns)]
    server, sampler = gateway_factory(replies)
    counts = counting(monkeypatch, wire, validations)
    session_id = server.sessions.open()
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        agent = Agent(wire, client, session_id, reorder=reorder)
        for index in range(turns):
            if index == edit_at:
                agent.edit_first_tool_output()
            agent.turn(index)
    return agent, sampler, counts, server.sessions.finish(session_id), replies


@pytest.mark.parametrize("reorder", [False, True], ids=["same-bytes", "parsed-json"])
@pytest.mark.parametrize("wire", WIRES)
def test_a_long_session_translates_only_its_new_messages(gateway_factory, monkeypatch, renderer, im_end,
                                                         wire, reorder):
    """Each turn validates and translates the two or three messages that are new, at turn 2 as
    at turn 18, whether the body re-sends the last one's bytes (the SDKs) or only equal JSON (keys
    reordered); the prompts and the one trace are a from-scratch render's, token for token."""
    turns, validations = 18, []
    agent, sampler, counts, finished, replies = play(gateway_factory, monkeypatch, wire, turns, reorder=reorder,
                                                     validations=validations)
    assert len(agent.history) > 2 * turns  # the history really grew
    opening = len(agent.sent[0]["messages" if wire != "responses" else "input"])
    # new per turn: a reply and its answer
    assert counts[0] == opening and max(counts[1:]) <= 3, counts
    assert validations[0] == opening and max(validations[1:]) <= 3, validations
    prompts, traces = from_scratch(wire, renderer, agent.sent, replies, im_end)
    for index, (call, prompt) in enumerate(zip(sampler.calls, prompts, strict=True)):
        assert tuple(call.prompt_token_ids) == prompt, f"turn {index}: the prompt differs from a full render"
    assert finished.traces == traces and len(traces) == 1
    assert finished.metadata["forks"] == 0 and finished.metadata["drift_events"] == 0


def test_a_changed_history_forks_alike_on_every_wire(gateway_factory, monkeypatch, renderer, im_end):
    """The agent rewrites its first tool output at turn 6: on every wire that request is
    translated whole (its history is not known), its prompt is a full render of the new history,
    the session forks once, and forks, drift and rows are the same as on the chat wire."""
    outcomes = {}
    for wire in WIRES:
        agent, sampler, counts, finished, replies = play(gateway_factory, monkeypatch, wire, 10, edit_at=6)
        assert counts[6] > 6 and max(counts[7:]) <= 3, (wire, counts)  # whole, then only what is new again
        prompts, traces = from_scratch(wire, renderer, agent.sent, replies, im_end)
        assert [tuple(call.prompt_token_ids) for call in sampler.calls] == prompts, wire
        assert finished.traces == traces, wire
        outcomes[wire] = (finished.metadata["forks"], finished.metadata["drift_events"], len(finished.traces))
        monkeypatch.undo()
    assert outcomes["chat"] == outcomes["anthropic"] == outcomes["responses"] == (1, 0, 2)


# --- the known history of wires that do not translate one message to one ----------------------

class Context:
    check_history = True


def _session():
    store = SessionStore(renderer=None)
    return store.get(store.open())


def _fresh(wire, body):
    return read_turn_request(Context(), _session(), json.loads(json.dumps(body)), wire)[1]


@pytest.mark.parametrize("first, added", [
    # a reply's text, then (next request) its call: one assistant message, not two
    ([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]}],
     [{"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "x"}]),
    # reasoning and a call, then a second call of the same reply
    ([{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}],
     [{"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "x"},
      {"type": "function_call_output", "call_id": "c2", "output": "y"}]),
], ids=["text-then-call", "call-then-call"])
def test_a_known_responses_history_never_ends_inside_a_folded_reply(first, added):
    """Consecutive reasoning / message / function_call items fold into one assistant message: a
    later request that adds to a reply the last request ended in translates that reply anew (the
    kept message is not changed), exactly as a fresh session does."""
    wire, session = responses_routes.RESPONSES, _session()
    items = [{"type": "message", "role": "user", "content": "go"}, *first]
    held = read_turn_request(Context(), session, {"input": items}, wire)[1]
    kept = json.loads(json.dumps(list(held)))  # held: a run of the known history (`tokens.TokenRun`)
    body = {"input": [*items, *added]}
    assert session.known_history.match("responses", body["input"]).count == 1  # up to the user message
    _, internal = read_turn_request(Context(), session, json.loads(json.dumps(body)), wire)
    assert internal == _fresh(wire, body) == responses_wire.to_internal(body["input"])
    outputs = sum(item["type"] == "function_call_output" for item in added)
    assert [m["role"] for m in internal] == ["user", "assistant", *["tool"] * outputs]
    assert held == kept  # the earlier request's messages were not folded into


@pytest.mark.parametrize("change", [
    lambda body: body.update(system="You are someone else."),
    lambda body: body["messages"][1]["content"][0].update(input={"b": "2", "a": "1"}),  # key order
    lambda body: body["messages"][1]["content"][0].update(input={"a": 1.0, "b": True}),  # 1 == 1.0 == True
])
def test_an_anthropic_request_equal_only_as_python_values_is_translated_anew(change):
    """A changed `system`, tool inputs with their keys reordered, or numbers of another type
    (equal in Python, not in JSON) are never taken as known: the translation is a fresh one."""
    wire, session = anthropic_routes.MESSAGES, _session()

    def body_of(turns):
        messages = [{"role": "user", "content": "go"}]
        for index in range(turns):
            messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{index}", "name": "shell",
                                                            "input": {"a": 1, "b": 2} if index == 0 else {"a": "1", "b": "2"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{index}",
                                                       "content": f"out {index}"}]}]
        return {"system": "You fix builds.", "messages": messages}

    for turns in (1, 2):
        read_turn_request(Context(), session, json.loads(json.dumps(body_of(turns))), wire)
    changed = body_of(3)
    change(changed)
    _, internal = read_turn_request(Context(), session, json.loads(json.dumps(changed)), wire)
    assert internal == _fresh(wire, changed)
    assert [m["tool_calls"][0]["function"]["arguments"] for m in internal if m["role"] == "assistant"] == \
        [m["tool_calls"][0]["function"]["arguments"] for m in _fresh(wire, changed) if m["role"] == "assistant"]


@pytest.mark.parametrize("wire_name", ["anthropic", "responses"])
def test_a_refused_request_is_refused_as_a_fresh_session_refuses_it(wire_name):
    """A known message broken later (a tool result answering no call) is refused with the same
    words as on a fresh session, and the session goes on serving good requests."""
    wire = anthropic_routes.MESSAGES if wire_name == "anthropic" else responses_routes.RESPONSES
    session = _session()

    def body_of(turns, broken=False):
        if wire_name == "anthropic":
            messages = [{"role": "user", "content": "go"}]
            for i in range(turns):
                answered = "zz" if broken and i == 0 else f"t{i}"
                messages += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "s",
                                                                "input": {"cmd": "ls"}}]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": answered,
                                                           "content": "out"}]}]
            return {"system": "s", "messages": messages}
        items = [{"type": "message", "role": "user", "content": "go"}]
        for i in range(turns):
            answered = "zz" if broken and i == 0 else f"c{i}"
            items += [{"type": "function_call", "call_id": f"c{i}", "name": "s", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": answered, "output": "out"}]
        return {"instructions": "s", "input": items}

    for turns in (1, 2, 3):
        read_turn_request(Context(), session, json.loads(json.dumps(body_of(turns))), wire)
    errors = []
    for target in (session, _session()):
        with pytest.raises(Exception) as caught:
            read_turn_request(Context(), target, json.loads(json.dumps(body_of(4, broken=True))), wire)
        errors.append(str(caught.value))
    assert "'zz' answers no tool call" in errors[0] and errors[0] == errors[1]
    _, internal = read_turn_request(Context(), session, json.loads(json.dumps(body_of(4))), wire)
    assert internal == _fresh(wire, body_of(4))


# --- known bytes: a changed byte anywhere in the kept prefix, runs shared across turns ----------

def _wire_bodies(wire, turns):
    """A conversation's request bodies (bytes, as an SDK serialises them), one per turn."""
    agent, bodies = Agent(wire, None, None), []
    for index in range(turns):
        bodies.append(json.dumps(agent.body(index)).encode())
        if wire == "chat":
            agent.history += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{index}", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"call_{index}", "content": tool_output(index)}]
        elif wire == "anthropic":
            agent.history += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{index}", "name": "shell",
                                                                  "input": {}}]},
                              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{index}",
                                                            "content": tool_output(index)}]}]
        else:
            agent.history += [{"type": "function_call", "call_id": f"c{index}", "name": "shell", "arguments": "{}"},
                              {"type": "function_call_output", "call_id": f"c{index}", "output": tool_output(index)}]
    return bodies


@pytest.mark.parametrize("wire", WIRES)
def test_one_changed_byte_in_an_old_message_is_never_taken_as_known(wire):
    """The body re-sends the kept bytes but one byte of the first tool output differs (same
    length, so every later byte is where it was): the known bytes are not split off, and the
    request is translated as a fresh session translates it, the changed byte included."""
    described = ROUTE_WIRE[wire][0].__dict__[ROUTE_WIRE[wire][1]]
    bodies, session = _wire_bodies(wire, 6), _session()
    for body in bodies[:5]:
        read_turn_request(Context(), session, body, described)
    old = b"[0.1] cc -O2"
    changed = bodies[5].replace(old, b"[0.1] cc -O3", 1)
    assert len(changed) == len(bodies[5]) and changed != bodies[5]
    assert session.known_history.split(described.name, changed, described.key) is None
    assert session.known_history.split(described.name, bodies[5], described.key) is not None  # as sent: split
    _, internal = read_turn_request(Context(), session, changed, described)
    fresh = read_turn_request(Context(), _session(), changed, described)[1]
    assert internal == fresh and "[0.1] cc -O3" in json.dumps(list(internal))


@pytest.mark.parametrize("wire", WIRES)
def test_each_turn_extends_the_last_ones_messages_in_place(wire):
    """A turn's internal messages are the last turn's run of them (`tokens.TokenRun`) extended
    by its new messages: no turn copies (or walks) the history it already holds."""
    described = ROUTE_WIRE[wire][0].__dict__[ROUTE_WIRE[wire][1]]
    session, runs = _session(), []
    for body in _wire_bodies(wire, 6):
        runs.append(read_turn_request(Context(), session, body, described)[1])
    assert all(later.starts_with(earlier) and len(later) > len(earlier) for earlier, later in zip(runs[1:], runs[2:]))
