"""`run/backend.py`: the `backend` fixture's object over a sampler, a renderer and the loop thread."""

import asyncio

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.run.backend import Backend
from agentcore_rl_harness.run.loop import LoopThread
from agentcore_rl_harness.samplers.scripted import ScriptedSampler

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return ChatTemplateRenderer(load_tokenizer(tiny_model_dir))


@pytest.fixture
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


class ScoringSampler(ScriptedSampler):
    """A scripted sampler that also scores: logprob -0.5 per token, recording each request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scored = []

    async def score(self, *, prompt_token_ids, completion_token_ids, temperature=1.0):
        self.scored.append((list(prompt_token_ids), list(completion_token_ids), temperature))
        return tuple(-0.5 for _ in completion_token_ids)


def _backend(sampler, renderer, loop, **sampling):
    return Backend(sampler=sampler, renderer=renderer, loop=loop, model_name="tiny",
                   sampling=SamplingParams(max_tokens=16, **sampling))


def test_sample_renders_messages_and_stops_at_the_end_of_turn(renderer, loop):
    sampler = ScriptedSampler(["The answer is 4."], encode=renderer.encode, logprob=-0.25, policy_version=3)
    backend = _backend(sampler, renderer, loop, temperature=0.7)
    completion = backend.sample(MESSAGES)
    call = sampler.calls[0]
    assert list(call.prompt_token_ids) == renderer.encode(renderer.render(MESSAGES))
    assert completion.prompt_token_ids == call.prompt_token_ids
    assert call.params.temperature == 0.7 and call.params.max_tokens == 16
    assert set(renderer.stop_token_ids) <= set(call.params.stop_token_ids)
    assert completion.text == "The answer is 4."
    assert completion.token_ids[-1] in renderer.stop_token_ids  # the stop token is kept, as in traces
    assert completion.logprobs == (-0.25,) * len(completion.token_ids)
    assert completion.finish_reason == "stop" and completion.policy_version == 3
    assert backend.policy_version == 3 and backend.model_name == "tiny"


def test_sample_takes_token_ids_and_explicit_params(renderer, loop):
    sampler = ScriptedSampler([[11, 12, 13, 14]])
    completion = _backend(sampler, renderer, loop).sample([5, 6, 7], params=SamplingParams(max_tokens=2, seed=1))
    assert sampler.calls[0].prompt_token_ids == (5, 6, 7)
    assert sampler.calls[0].params.seed == 1
    assert completion.token_ids == (11, 12) and completion.finish_reason == "length"


@pytest.mark.parametrize("prompt", ["just text", [], [{"role": "user", "content": "x"}, 3], [True, False]])
def test_a_prompt_is_messages_or_token_ids(renderer, loop, prompt):
    with pytest.raises(TypeError, match="a prompt is a non-empty list of chat messages"):
        _backend(ScriptedSampler([[1]]), renderer, loop).sample(prompt)


def test_score_encodes_text_and_sums_logprobs(renderer, loop):
    sampler = ScoringSampler([])
    score = _backend(sampler, renderer, loop).score(MESSAGES, "4", temperature=0.5)
    prompt, completion, temperature = sampler.scored[0]
    assert prompt == renderer.encode(renderer.render(MESSAGES)) and completion == renderer.encode("4")
    assert temperature == 0.5
    assert score.token_ids == tuple(completion) and score.total == pytest.approx(-0.5 * len(completion))
    assert _backend(sampler, renderer, loop).score([1, 2], [3, 4]).logprobs == (-0.5, -0.5)


def test_a_sampler_that_cannot_score_says_so(renderer, loop):
    with pytest.raises(HarnessError, match="the ScriptedSampler sampler cannot score"):
        _backend(ScriptedSampler([]), renderer, loop).score([1, 2], [3])


def test_async_code_awaits_the_async_methods_and_the_sync_bridge_refuses_the_loop(renderer, loop):
    backend = _backend(ScriptedSampler([[21, 22], [23]]), renderer, loop)

    async def in_an_async_test():
        completion = await backend.asample([1, 2])
        with pytest.raises(HarnessError, match=r"use `await backend.asample\(...\)`"):
            backend.sample([1, 2])
        return completion

    assert loop.run(in_an_async_test()).token_ids[:2] == (21, 22)
    # a sync caller on another thread with its own loop still gets the bridge
    assert asyncio.run(asyncio.to_thread(backend.sample, [1])).token_ids[0] == 23
