import asyncio
import random

import pytest
import torch

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.records import FinishReason, SamplingParams
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def sampler(model):
    sampler = HFLocalSampler(model, batch_wait_s=0.02)
    yield sampler
    sampler.close()


def _prompt(length, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, 49000) for _ in range(length)]


def _sample_all(sampler, requests):
    async def run():
        return await asyncio.gather(
            *(sampler.sample(prompt_token_ids=prompt, params=params) for prompt, params in requests)
        )

    return asyncio.run(run())


def _reference_logits(model, prompt, token_ids):
    with torch.inference_mode():
        logits = model(torch.tensor([list(prompt) + list(token_ids)])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def test_is_a_sampling_backend(sampler):
    assert isinstance(sampler, SamplingBackend)


def test_batched_logprobs_match_a_plain_forward_pass(sampler, model):
    temperatures = [1.0, 0.7, 1.0, 0.7, 0.0, 1.0]
    lengths = [1, 4, 9, 17, 30, 6]
    requests = [
        (_prompt(length, seed), SamplingParams(temperature=temperature, max_tokens=8, seed=seed))
        for seed, (length, temperature) in enumerate(zip(lengths, temperatures))
    ]
    batches_before = sampler.batches_run

    results = _sample_all(sampler, requests)

    assert sampler.batches_run - batches_before == 1  # left-padded together
    for (prompt, params), result in zip(requests, results):
        assert result.finish_reason is FinishReason.LENGTH and len(result.token_ids) == 8
        logits = _reference_logits(model, prompt, result.token_ids)
        expected = torch.log_softmax(logits / (params.temperature or 1.0), dim=-1)
        expected = expected.gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(result.logprobs), expected, atol=1e-4, rtol=0)
        if params.temperature == 0:
            assert list(result.token_ids) == logits.argmax(-1).tolist()


def test_concurrent_requests_share_batches(sampler):
    requests = [(_prompt(5 + i, i), SamplingParams(max_tokens=3)) for i in range(8)]
    batches_before, forwards_before = sampler.batches_run, sampler.forward_calls

    results = _sample_all(sampler, requests)

    assert len(results) == 8
    assert sampler.batches_run - batches_before < 8
    assert sampler.forward_calls - forwards_before < 8 * 3


def test_stop_token_ends_the_sample_and_is_kept(sampler):
    prompt = _prompt(6, 42)
    (free,) = _sample_all(sampler, [(prompt, SamplingParams(temperature=0, max_tokens=8))])
    stop = free.token_ids[3]
    cut = free.token_ids.index(stop) + 1

    (stopped,) = _sample_all(
        sampler, [(prompt, SamplingParams(temperature=0, max_tokens=8, stop_token_ids=(stop,)))]
    )

    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.token_ids == free.token_ids[:cut] and stopped.token_ids[-1] == stop
    assert stopped.logprobs == free.logprobs[:cut]


def test_max_tokens_gives_length(sampler):
    (result,) = _sample_all(sampler, [(_prompt(3, 1), SamplingParams(max_tokens=5, stop_token_ids=(0,)))])
    assert result.finish_reason is FinishReason.LENGTH
    assert len(result.token_ids) == len(result.logprobs) == 5


def test_top_k_1_and_tiny_top_p_equal_greedy(sampler):
    prompt = _prompt(7, 3)
    greedy, top_k, top_p = _sample_all(
        sampler,
        [
            (prompt, SamplingParams(temperature=0, max_tokens=6)),
            (prompt, SamplingParams(temperature=1.0, top_k=1, max_tokens=6, seed=5)),
            (prompt, SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=6, seed=6)),
        ],
    )
    assert top_k.token_ids == greedy.token_ids == top_p.token_ids
    # both at temperature 1, and truncation is not folded into the logprob
    torch.testing.assert_close(torch.tensor(top_k.logprobs), torch.tensor(greedy.logprobs), atol=1e-4, rtol=0)


def test_seed_makes_sampling_deterministic(sampler):
    prompt = _prompt(5, 9)
    seeded = SamplingParams(temperature=1.0, max_tokens=10, seed=123)
    first, second, other = _sample_all(
        sampler, [(prompt, seeded), (prompt, seeded), (prompt, SamplingParams(max_tokens=10, seed=124))]
    )
    (alone,) = _sample_all(sampler, [(prompt, seeded)])
    assert first.token_ids == second.token_ids == alone.token_ids
    assert other.token_ids != first.token_ids


def test_too_long_prompt_is_a_sampling_error(sampler, model):
    limit = model.config.max_position_embeddings
    with pytest.raises(SamplingError, match=f"{limit} positions"):
        _sample_all(sampler, [([5] * (limit - 3), SamplingParams(max_tokens=10))])


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=0), SamplingParams(temperature=-1), SamplingParams(top_p=0.0)],
)
def test_bad_params_are_rejected(sampler, params):
    with pytest.raises(SamplingError):
        _sample_all(sampler, [([5, 6], params)])


def test_worker_errors_reach_every_caller_and_the_worker_survives(sampler, model):
    class Broken(torch.nn.Module):
        config = model.config

        def forward(self, **kwargs):
            raise RuntimeError("boom")

    sampler.swap_model(Broken(), policy_version=7)
    try:
        outcomes = asyncio.run(_gather_outcomes(sampler, 3))
    finally:
        sampler.swap_model(model, policy_version=0)
    assert len(outcomes) == 3
    for outcome in outcomes:
        assert isinstance(outcome, SamplingError) and "boom" in str(outcome)
        assert isinstance(outcome.__cause__, RuntimeError)

    sampler.set_policy_version(3)
    (result,) = _sample_all(sampler, [([5, 6], SamplingParams(max_tokens=2))])
    assert result.policy_version == 3
    sampler.set_policy_version(0)


async def _gather_outcomes(sampler, count):
    return await asyncio.gather(
        *(sampler.sample(prompt_token_ids=[5, 6], params=SamplingParams(max_tokens=2)) for _ in range(count)),
        return_exceptions=True,
    )


def test_closed_sampler_refuses_work(model):
    sampler = HFLocalSampler(model)
    sampler.close()
    with pytest.raises(SamplingError, match="closed"):
        _sample_all(sampler, [([5], SamplingParams(max_tokens=1))])


def test_from_path_accepts_a_name_or_folder(tiny_model_dir):
    sampler = HFLocalSampler.from_path(tiny_model_dir, max_batch_size=2)
    try:
        (result,) = _sample_all(sampler, [([5, 6, 7], SamplingParams(temperature=0, max_tokens=3))])
        assert len(result.token_ids) == 3
        assert sampler.max_batch_size == 2
    finally:
        sampler.close()
