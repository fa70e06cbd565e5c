import asyncio

import pytest

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.models import load_tokenizer
from agentcore_rl_harness.records import FinishReason, SamplingParams
from agentcore_rl_harness.samplers.scripted import ScriptedCall, ScriptedSampler


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def im_end(tokenizer):
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


def _sample(sampler, prompt=(1, 2, 3), **params):
    return asyncio.run(sampler.sample(prompt_token_ids=prompt, params=SamplingParams(**params)))


def test_is_a_sampling_backend():
    assert isinstance(ScriptedSampler([]), SamplingBackend)


def test_replies_in_order_with_fixed_logprobs_and_recorded_calls():
    sampler = ScriptedSampler([[10, 11], [12]], logprob=-0.25)

    first = _sample(sampler, prompt=[1, 2], max_tokens=5)
    second = _sample(sampler, prompt=[3], temperature=0.5)

    assert (first.token_ids, first.logprobs, first.finish_reason) == ((10, 11), (-0.25, -0.25), FinishReason.STOP)
    assert second.token_ids == (12,)
    assert sampler.calls == [
        ScriptedCall((1, 2), SamplingParams(max_tokens=5)),
        ScriptedCall((3,), SamplingParams(temperature=0.5)),
    ]
    with pytest.raises(SamplingError, match="ran out of replies: 2 scripted"):
        _sample(sampler)


def test_text_reply_ends_with_the_stop_token_like_a_model(tokenizer, im_end):
    sampler = ScriptedSampler(["The answer is 4."], encode=tokenizer.encode)

    result = _sample(sampler, stop_token_ids=(im_end,))

    assert result.finish_reason is FinishReason.STOP
    assert result.token_ids[-1] == im_end
    assert tokenizer.decode(result.token_ids) == "The answer is 4.<|im_end|>"
    assert len(result.logprobs) == len(result.token_ids)


def test_stop_token_cuts_after_its_first_occurrence(tokenizer, im_end):
    sampler = ScriptedSampler(["Hi<|im_end|>ignored<|im_end|>"], encode=tokenizer.encode)
    result = _sample(sampler, stop_token_ids=(99999, im_end))
    assert tokenizer.decode(result.token_ids) == "Hi<|im_end|>"
    assert result.finish_reason is FinishReason.STOP


def test_max_tokens_truncates_to_length(im_end):
    sampler = ScriptedSampler([[5, 6, 7, 8]])
    result = _sample(sampler, max_tokens=3, stop_token_ids=(im_end,))
    assert result.token_ids == (5, 6, 7) and result.finish_reason is FinishReason.LENGTH


def test_callable_replies_and_logprob_function():
    sampler = ScriptedSampler(
        lambda prompt, params: [len(prompt), int(params.temperature * 10)],
        logprob=lambda position, token_id: -0.1 * (position + 1),
        policy_version=4,
    )
    result = _sample(sampler, prompt=[1, 2, 3], temperature=0.7)
    assert result.token_ids == (3, 7)
    assert result.logprobs == (-0.1, -0.2)
    assert result.policy_version == 4


def test_text_replies_need_encode():
    with pytest.raises(ValueError, match="encode"):
        ScriptedSampler(["hello"])
    with pytest.raises(SamplingError, match="encode"):
        _sample(ScriptedSampler(lambda prompt, params: "hello"))


def test_on_token_receives_every_token_in_order_before_the_result(im_end):
    streamed = []
    sampler = ScriptedSampler([[5, 6, 7]], logprob=lambda position, token_id: -float(position))

    async def run():
        result = await sampler.sample(
            prompt_token_ids=[1], params=SamplingParams(stop_token_ids=(im_end,)),
            on_token=lambda token_id, logprob: streamed.append((token_id, logprob)),
        )
        assert streamed == list(zip(result.token_ids, result.logprobs))  # all delivered before return
        return result

    result = asyncio.run(run())
    assert result.token_ids == (5, 6, 7, im_end)
