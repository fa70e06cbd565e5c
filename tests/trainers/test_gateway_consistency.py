"""Gateway, sampler and trainer agree on every trained token (the on-policy consistency test).

Traces come from a real multi-turn tool conversation through the gateway (the real openai SDK,
the real HFLocalSampler, the tiny model, the tool-aware template); the LocalTrainer recomputes
their logprobs before any update. A ratio of 1 means no component mis-aligned a token; shifting
the mask by one position must break it.
"""

from __future__ import annotations

import dataclasses
import json

import openai
import pytest

torch = pytest.importorskip("torch")

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
}}]


def _gateway_traces(model, tokenizer, temperature):
    from agentcore_rl_harness.gateway import ChatTemplateRenderer, GatewayServer
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    sampler = HFLocalSampler(model)
    sampling = SamplingParams(temperature=temperature, max_tokens=8, seed=3)
    traces = []
    try:
        with GatewayServer(sampler=sampler, renderer=ChatTemplateRenderer(tokenizer),
                           model_id="tiny", sampling=sampling) as server:
            for question in ("What is 2 + 3?", "What is 40 - 1?"):
                session_id = server.sessions.open()
                client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
                messages = [{"role": "user", "content": question}]
                for _ in range(2):
                    reply = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
                    message = reply.choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    # untrained tokens between trained ones: a tool result for each call the
                    # model made (the gateway refuses results that answer no call), else a user turn
                    if message.tool_calls:
                        messages += [{"role": "tool", "tool_call_id": call.id,
                                      "content": json.dumps({"result": 5})} for call in message.tool_calls]
                    else:
                        messages.append({"role": "user", "content": json.dumps({"result": 5})})
                traces += server.sessions.finish(session_id).traces
    finally:
        sampler.close()
    return sampler, traces


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_trainer_recomputes_the_gateway_logprobs(tiny_model_dir, temperature):
    from agentcore_rl_harness.models import load_model, load_tokenizer
    from agentcore_rl_harness.trainers.local import LocalTrainer, LocalTrainerConfig

    model = load_model(tiny_model_dir)
    sampler, traces = _gateway_traces(model, load_tokenizer(tiny_model_dir), temperature)
    assert len(traces) == 2
    trainer = LocalTrainer(model, config=LocalTrainerConfig(temperature=temperature))
    for trace, recomputed in zip(traces, trainer.compute_logprobs(traces)):
        assert 0 in trace.loss_mask[trace.loss_mask.index(1):]  # tool tokens between turns
        for mask, recorded, value in zip(trace.loss_mask, trace.logprobs, recomputed):
            if mask:
                assert value == pytest.approx(recorded, abs=1e-4)  # ratio exp(0) == 1

    # mis-align by one token: the same check must fail
    trace = traces[0]
    shifted = dataclasses.replace(
        trace, loss_mask=(0, *trace.loss_mask[:-1]), logprobs=(None, *trace.logprobs[:-1])
    )
    (recomputed,) = trainer.compute_logprobs([shifted])
    gaps = [abs(v - r) for m, r, v in zip(shifted.loss_mask, shifted.logprobs, recomputed) if m]
    assert max(gaps) > 1e-2
