"""The gateway with the real HFLocalSampler and the tiny model: traces a trainer can recompute."""

from __future__ import annotations

import openai
import pytest

torch = pytest.importorskip("torch")


def test_forward_pass_over_a_finished_trace_reproduces_its_logprobs(tiny_model_dir, renderer):
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    model = load_model(tiny_model_dir)
    sampler = HFLocalSampler(model)
    sampling = SamplingParams(temperature=0.8, max_tokens=6, seed=7)
    try:
        with GatewayServer(sampler=sampler, renderer=renderer, model_id="tiny", sampling=sampling) as server:
            session_id = server.sessions.open()
            client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
            messages = [{"role": "user", "content": "Say something."}]
            for follow_up in ("More.", "Again."):
                reply = client.chat.completions.create(model="tiny", messages=messages)
                messages += [reply.choices[0].message.model_dump(exclude_none=True),
                             {"role": "user", "content": follow_up}]
            client.chat.completions.create(model="tiny", messages=messages)
            finished = server.sessions.finish(session_id)
    finally:
        sampler.close()

    (trace,) = finished.traces  # the history is replayed from the sampled tokens: one row
    assert finished.turns == 3 and sum(trace.loss_mask) == finished.usage.completion_tokens
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([trace.token_ids])).logits[0].float()
    recomputed = torch.log_softmax(logits / 0.8, dim=-1)
    for offset, (mask, logprob) in enumerate(zip(trace.loss_mask, trace.logprobs)):
        if mask:
            position = trace.prompt_length + offset
            expected = recomputed[position - 1, trace.token_ids[position]].item()
            assert logprob == pytest.approx(expected, abs=2e-4)
