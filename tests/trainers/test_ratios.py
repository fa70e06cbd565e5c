"""`trainers.ratios`: one k3 / clipping definition, and the in-process and service trainers agree on it."""

import math

import pytest
import torch

from agentcore_rl_harness.trainers.datum import TokenDatum
from agentcore_rl_harness.trainers.grpo import policy_loss
from agentcore_rl_harness.trainers.ratios import is_clipped, k3, logprob_stats


def test_k3_is_the_same_on_floats_and_tensors_and_never_negative():
    deltas = [-2.0, -0.3, 0.0, 0.4, 1.5]
    on_tensor = k3(torch.tensor(deltas, dtype=torch.float64)).tolist()
    assert on_tensor == pytest.approx([k3(d) for d in deltas])
    assert k3(0.0) == 0.0 and all(value > 0 for value in on_tensor if value != 0.0)
    assert k3(0.5) == pytest.approx(math.exp(0.5) - 0.5 - 1.0)


@pytest.mark.parametrize(
    ("ratio", "advantage", "loss_fn", "clipped"),
    [
        (1.5, 1.0, "ppo", True),  # above 1 + clip_high with a positive advantage
        (1.5, -1.0, "ppo", False),
        (0.5, -1.0, "ppo", True),  # below 1 - clip_low with a negative advantage
        (1.1, 1.0, "ppo", False),
        (3.0, 1.0, "cispo", True),
        (1.5, 1.0, "cispo", False),
        (9.0, 1.0, "importance_sampling", False),
    ],
)
def test_is_clipped(ratio, advantage, loss_fn, clipped):
    assert is_clipped(ratio, advantage, loss_fn=loss_fn, clip_low=0.2, clip_high=0.2, tis_cap=2.0) is clipped


def test_service_stats_match_the_in_process_loss_on_the_same_tokens():
    old = [0.0, -1.0, -0.5, -2.0]
    new = [0.0, -0.6, -0.9, -1.0]
    mask = [0.0, 1.0, 1.0, 1.0]
    datum = TokenDatum(group_id="g", rollout_key="g/0", prompt_length=1, input_tokens=(1, 2, 3, 4),
                       target_tokens=(2, 3, 4, 5), mask=tuple(mask), logprobs=tuple(old),
                       advantages=(0.0, 1.0, 1.0, 1.0), advantage=1.0)
    stats = logprob_stats([datum], [new], loss_fn="ppo", clip_low=0.2, clip_high=0.2)
    loss = policy_loss(torch.tensor([new]), torch.tensor([old]), torch.tensor([1.0]), torch.tensor([mask]),
                       clip_low=0.2, clip_high=0.2, tis_cap=None, kl_coef=0.0, ref_logprobs=None)
    assert stats.sampler_kl == pytest.approx(loss.sampler_kl_sum / loss.trained_tokens)
    assert stats.clip_fraction == pytest.approx(loss.clipped_tokens / loss.trained_tokens)


def test_mismatched_logprobs_give_no_stats_rather_than_wrong_ones():
    datum = TokenDatum(group_id="g", rollout_key="g/0", prompt_length=1, input_tokens=(1, 2),
                       target_tokens=(2, 3), mask=(0.0, 1.0), logprobs=(0.0, -1.0),
                       advantages=(0.0, 1.0), advantage=1.0)
    assert logprob_stats([datum], [[0.0]], loss_fn="ppo").sampler_kl is None
    assert logprob_stats([datum], [None], loss_fn="ppo").clip_fraction is None
