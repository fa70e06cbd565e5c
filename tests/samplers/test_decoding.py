"""`samplers.decoding`: the token drawing both in-process decoders use."""

import math

import pytest
import torch

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.samplers.decoding import draw, is_plain, tempered_logprobs, validate_params


def _row(*probs):
    return torch.log(torch.tensor(probs, dtype=torch.float32))


def test_top_k_only_ever_draws_the_k_best():
    logprobs = _row(0.05, 0.4, 0.05, 0.3, 0.2)
    generator = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=1.0, top_k=2, max_tokens=1)
    assert {draw(logprobs, params, generator) for _ in range(300)} == {1, 3}


def test_top_p_keeps_the_smallest_set_reaching_p_and_always_the_best():
    logprobs = _row(0.6, 0.25, 0.1, 0.05)
    generator = torch.Generator().manual_seed(0)
    assert {draw(logprobs, SamplingParams(top_p=0.8, max_tokens=1), generator) for _ in range(300)} == {0, 1}
    assert {draw(logprobs, SamplingParams(top_p=0.1, max_tokens=1), generator) for _ in range(50)} == {0}


def test_a_seeded_generator_repeats_its_draws():
    logprobs = _row(0.25, 0.25, 0.25, 0.25)
    params = SamplingParams(temperature=1.0, top_k=3, max_tokens=1)
    first = [draw(logprobs, params, torch.Generator().manual_seed(7)) for _ in range(5)]
    again = [draw(logprobs, params, torch.Generator().manual_seed(7)) for _ in range(5)]
    assert first == again


def test_tempered_logprobs_take_greedy_rows_at_temperature_one():
    logits = torch.tensor([[2.0, 0.0], [2.0, 0.0]])
    out = tempered_logprobs(logits, torch.tensor([0.0, 0.5]))
    assert out[0].tolist() == pytest.approx(torch.log_softmax(logits[0], -1).tolist())
    assert out[1].tolist() == pytest.approx(torch.log_softmax(logits[1] / 0.5, -1).tolist())
    assert math.isclose(float(tempered_logprobs(logits[0], 0.0).exp().sum()), 1.0, rel_tol=1e-6)


def test_is_plain_means_sampled_without_truncation():
    assert is_plain(SamplingParams(temperature=0.7, max_tokens=1))
    assert not is_plain(SamplingParams(temperature=0.0, max_tokens=1))
    assert not is_plain(SamplingParams(temperature=0.7, top_k=5, max_tokens=1))


@pytest.mark.parametrize(
    ("params", "named"),
    [
        (SamplingParams(max_tokens=0), "max_tokens"),
        (SamplingParams(temperature=-1.0, max_tokens=1), "temperature"),
        (SamplingParams(top_p=0.0, max_tokens=1), "top_p"),
        (SamplingParams(top_k=-2, max_tokens=1), "top_k"),
    ],
)
def test_bad_parameters_are_refused_by_name(params, named):
    with pytest.raises(SamplingError, match=named):
        validate_params(params)
