"""Fixtures for gateway tests: the real SmolLM2 tokenizer with the packaged tool template."""

from __future__ import annotations

import pytest

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template


@pytest.fixture(scope="session")
def smol_tokenizer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def renderer(smol_tokenizer):
    return ChatTemplateRenderer(smol_tokenizer, chat_template=load_template())


@pytest.fixture(scope="session")
def im_end(smol_tokenizer):
    return smol_tokenizer.convert_tokens_to_ids("<|im_end|>")


def scripted_logprob(position, token_id):
    return -0.001 * (position + 1) - token_id * 1e-7


@pytest.fixture
def gateway_factory(renderer):
    """Start GatewayServers with a ScriptedSampler; all are stopped after the test."""
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.samplers.scripted import ScriptedSampler

    servers = []

    def start(replies, **kwargs):
        sampler = kwargs.pop("sampler", None) or ScriptedSampler(replies, encode=renderer.encode,
                                                                  logprob=scripted_logprob)
        server = GatewayServer(sampler=sampler, renderer=renderer, model_id="smollm2-test", **kwargs).start()
        servers.append(server)
        return server, sampler

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def check_trace(renderer, im_end):
    """Check a trace token by token against the sampler's calls and the scripted replies."""

    def check(trace, calls, replies):
        assert trace.token_ids[:trace.prompt_length] == calls[0].prompt_token_ids
        expected_mask = [0] * (len(trace.token_ids) - trace.prompt_length)
        for call, text in zip(calls, replies, strict=True):
            prompt = call.prompt_token_ids
            ids = [*renderer.encode(text), im_end]
            assert trace.token_ids[:len(prompt)] == prompt
            assert list(trace.token_ids[len(prompt):len(prompt) + len(ids)]) == ids
            start = len(prompt) - trace.prompt_length
            expected_mask[start:start + len(ids)] = [1] * len(ids)
            assert list(trace.logprobs[start:start + len(ids)]) == [
                scripted_logprob(i, t) for i, t in enumerate(ids)]
        assert list(trace.loss_mask) == expected_mask
        assert all(lp is None for m, lp in zip(trace.loss_mask, trace.logprobs) if m == 0)

    return check
