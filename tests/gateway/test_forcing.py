"""Teacher-forced sessions (`gateway/forcing.py`): scripted assistant turns rendered through the
chat template, driven over loopback by the real openai and anthropic SDKs."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from agentcore_rl_harness.gateway.forcing import ScriptError, normalize_script
from agentcore_rl_harness.gateway.rendering import normalize_messages

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]
SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "12 + 7"}}]},
    {"content": "Checking.", "tool_calls": [{"name": "calculator", "arguments": {"expression": "19 * 2"}}]},
    {"content": "The answer is 38."},
]
RESULTS = ["19", "38"]


def play(client, messages, results=RESULTS):
    """An agent loop: call the model, run each tool call (answers from `results`), until text."""
    results = list(results)
    while True:
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return messages, reply
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": results.pop(0)})


def test_a_scripted_session_is_one_exact_trace_of_the_templates_own_rendering(gateway_factory, renderer):
    server, sampler = gateway_factory([])  # nothing scripted to sample: every turn is forced
    session_id = server.sessions.open(script=SCRIPT)
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    messages, last = play(client, [{"role": "system", "content": "Use the calculator."},
                                   {"role": "user", "content": "What is (12 + 7) * 2?"}])
    assert last.choices[0].message.content == "The answer is 38."
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", ())]
    assert calls == [("calculator", {"expression": "12 + 7"}), ("calculator", {"expression": "19 * 2"})]
    assert sampler.calls == []  # the sampler never sampled

    finished = server.sessions.finish(session_id)
    (trace,) = finished.traces
    assert finished.metadata["drift_events"] == 0 and finished.metadata["forks"] == 0
    # The whole row is the template's rendering of the finished conversation, token for token
    # in the trained part: the assistant turns are exactly what the template writes for them.
    rendered = renderer.render(normalize_messages(messages), tools=TOOLS, add_generation_prompt=False)
    assert renderer.decode(trace.token_ids) == rendered.removesuffix("\n")
    trained = [t for t, m in zip(trace.token_ids[trace.prompt_length:], trace.loss_mask) if m]
    expected = "".join(
        renderer.render(normalize_messages(messages[:i + 1]), tools=TOOLS, add_generation_prompt=False)
        .removeprefix(renderer.render(normalize_messages(messages[:i]), tools=TOOLS))
        .removesuffix("\n")
        for i, m in enumerate(messages) if m["role"] == "assistant")
    assert renderer.decode(trained) == expected.replace("<|im_start|>assistant\n", "")
    assert sum(trace.loss_mask) == finished.usage.completion_tokens
    # No scorer on the scripted sampler: forced logprobs are 0.0, and the trace says so.
    assert {lp for lp, m in zip(trace.logprobs, trace.loss_mask) if m} == {0.0}
    assert trace.metadata["teacher_forced"] is True and trace.metadata["forced_logprobs"] == "zero"
    assert trace.metadata["script_turns_used"] == trace.metadata["script_turns"] == 3


def test_a_request_past_the_script_is_a_400_naming_the_script(gateway_factory):
    server, _ = gateway_factory([])
    session_id = server.sessions.open(script=SCRIPT[2:])
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    messages = [{"role": "user", "content": "Hi"}]
    first = client.chat.completions.create(model="m", messages=messages)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "More"}]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="m", messages=messages)
    assert error.value.code == "script_exhausted"
    assert "script of 1 assistant turns and the agent asked for turn 2" in str(error.value)
    finished = server.sessions.finish(session_id)
    assert finished.metadata["script_exhausted"] == 1 and finished.turns == 1
    assert finished.metadata.get("gateway_errors", 0) == 0  # the script's fault, not the gateway's


@pytest.mark.parametrize("script, message", [
    ([], "must be a non-empty list"),
    ("call the calculator", "must be a non-empty list"),
    ([{"role": "assistant"}], r"_script\[0\] must be an assistant turn"),
    ([{"content": "ok"}, {"tool_calls": [{"name": "", "arguments": {}}]}],
     r"_script\[1\].tool_calls\[0\] needs a non-empty 'name'"),
    ([{"tool_calls": [{"name": "f", "arguments": "not json"}]}], r"needs a non-empty 'name' and 'arguments'"),
    ([{"content": 3}], r"_script\[0\].content must be a string"),
])
def test_a_bad_script_is_refused_when_the_session_opens(gateway_factory, script, message):
    server, _ = gateway_factory([])
    with pytest.raises(ScriptError, match=message):
        server.sessions.open(script=script)
    assert len(server.sessions) == 0


def test_openai_shaped_calls_with_json_string_arguments_are_accepted():
    (turn,) = normalize_script([{"tool_calls": [{"type": "function", "function": {
        "name": "f", "arguments": '{"x": 1}'}}]}])
    assert turn["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]


def test_streaming_and_the_anthropic_wire_are_forced_too(gateway_factory):
    server, _ = gateway_factory([])
    session_id = server.sessions.open(script=SCRIPT[:1] + SCRIPT[2:])
    client = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id, max_retries=0)
    tools = [{"name": "calculator", "description": "Evaluate arithmetic.",
              "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}}}]
    messages = [{"role": "user", "content": "12 + 7?"}]
    first = client.messages.create(model="m", max_tokens=100, messages=messages, tools=tools)
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("calculator", {"expression": "12 + 7"})
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "19"}]}]
    text = ""
    with client.messages.stream(model="m", max_tokens=100, messages=messages, tools=tools) as stream:
        for chunk in stream.text_stream:
            text += chunk
    assert text == "The answer is 38."
    (trace,) = server.sessions.finish(session_id).traces
    assert trace.metadata["teacher_forced"] and trace.metadata["drift_events"] == 0


def test_with_a_scoring_sampler_forced_tokens_carry_the_policys_logprobs(tiny_model_dir, renderer):
    torch = pytest.importorskip("torch")
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    model = load_model(tiny_model_dir)
    sampler = HFLocalSampler(model)
    try:
        with GatewayServer(sampler=sampler, renderer=renderer, model_id="tiny") as server:
            session_id = server.sessions.open(script=SCRIPT)
            client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
            play(client, [{"role": "user", "content": "What is (12 + 7) * 2?"}])
            (trace,) = server.sessions.finish(session_id).traces
    finally:
        sampler.close()
    assert trace.metadata["forced_logprobs"] == "policy"
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([trace.token_ids])).logits[0].float()
    recomputed = torch.log_softmax(logits, dim=-1)
    trained = [(i, lp) for i, (m, lp) in enumerate(zip(trace.loss_mask, trace.logprobs)) if m]
    assert trained and all(lp < 0 for _, lp in trained)
    for offset, logprob in trained:
        position = trace.prompt_length + offset
        assert logprob == pytest.approx(float(recomputed[position - 1, trace.token_ids[position]]), abs=2e-3)


def test_a_session_opened_without_scoring_never_runs_the_model_and_says_zero(tiny_model_dir, renderer):
    # The warm-up's demonstrations: cross-entropy needs no logprobs, so no forward pass per turn.
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    sampler = HFLocalSampler(load_model(tiny_model_dir))
    try:
        with GatewayServer(sampler=sampler, renderer=renderer, model_id="tiny") as server:
            session_id = server.sessions.open(script=SCRIPT, score_forced=False)
            client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
            play(client, [{"role": "user", "content": "What is (12 + 7) * 2?"}])
            (trace,) = server.sessions.finish(session_id).traces
    finally:
        sampler.close()
    assert trace.metadata["teacher_forced"] is True and trace.metadata["forced_logprobs"] == "zero"
    forced = [lp for mask, lp in zip(trace.loss_mask, trace.logprobs) if mask]
    assert forced and all(lp == 0.0 for lp in forced)
    assert sampler.prefill_tokens == 0  # the sampler never ran a forward pass


def test_the_admin_api_opens_a_scripted_session(gateway_factory):
    import httpx

    server, sampler = gateway_factory([], admin_token="secret-token")
    admin = server.base_url.removesuffix("/v1") + "/admin/sessions"
    headers = {"X-Admin-Token": "secret-token"}
    bad = httpx.post(admin, json={"script": [{"content": 3}]}, headers=headers)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "script_invalid"
    assert "_script[0].content must be a string" in bad.json()["error"]["message"]
    opened = httpx.post(admin, json={"script": SCRIPT[2:]}, headers=headers)
    assert opened.status_code == 201
    session_id = opened.json()["session_id"]
    client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2 * 19?"}])
    assert reply.choices[0].message.content == "The answer is 38." and sampler.calls == []
    finished = httpx.post(f"{admin}/{session_id}/finish", headers=headers).json()
    assert finished["traces"][0]["metadata"]["teacher_forced"] is True
