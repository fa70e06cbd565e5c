import dataclasses
import math
import subprocess
import sys

import pytest
import torch

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.trainers import (
    GRPOConfig,
    TrainGroup,
    TrainSample,
    build_batch,
    group_advantages,
    groups_from_rollouts,
    policy_loss,
)


def _trace(completion=3, mask=None, versions=(0,)):
    mask = tuple(mask) if mask is not None else (1,) * completion
    return Trace(
        token_ids=tuple(range(10, 12 + len(mask))),
        prompt_length=2,
        loss_mask=mask,
        logprobs=tuple(-0.5 if m else None for m in mask),
        finish_reason="stop",
        metadata={"policy_versions": list(versions)},
    )


def _group(group_id, rewards, traces_per_sample=None):
    traces_per_sample = traces_per_sample or [1] * len(rewards)
    return TrainGroup(
        group_id=group_id,
        samples=tuple(
            TrainSample(f"{group_id}/{i}", reward, tuple(_trace() for _ in range(n)))
            for i, (reward, n) in enumerate(zip(rewards, traces_per_sample))
        ),
    )


# --- advantages -------------------------------------------------------------------------------


def test_advantages_are_rewards_centred_in_the_group():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=False) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([3.0, 1.0], normalize_std=False) == [1.0, -1.0]


def test_advantages_divided_by_population_std():
    # mean 0.5, population std 0.5
    assert group_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=True, eps=0.0) == [1.0, -1.0, -1.0, 1.0]
    # [1, 0, 0, 0]: mean 0.25, std sqrt(3)/4
    values = group_advantages([1.0, 0.0, 0.0, 0.0], normalize_std=True, eps=0.0)
    assert values[0] == pytest.approx(0.75 / (math.sqrt(3) / 4))
    assert values[1] == pytest.approx(-0.25 / (math.sqrt(3) / 4))


def test_constant_rewards_give_zero_advantages_not_nan():
    assert group_advantages([2.0, 2.0, 2.0], normalize_std=True) == [0.0, 0.0, 0.0]


# --- failure policy ---------------------------------------------------------------------------


def _rollout(group_id, index, status, reward):
    return Rollout(
        run_id="r", task="t", row_id=group_id, sample_index=index, group_id=group_id, phase="train",
        step=0, session_id=f"{group_id}-{index}", status=status, error=None, reward=reward,
        rewards={}, success=None, result=None, turns=1, usage=Usage(), elapsed_s=0.0,
        traces=(_trace(),),
    )


def test_failed_rollouts_are_left_out_of_their_group_and_counted_not_scored_zero():
    rollouts = [
        _rollout("a", 0, Status.COMPLETED, 1.0),
        _rollout("a", 1, Status.TASK_FAILED, 0.0),
        _rollout("a", 2, Status.INFRA_ERROR, None),
        _rollout("a", 3, Status.TIMEOUT, 0.0),
        _rollout("b", 0, Status.AGENT_ERROR, None),
        _rollout("b", 1, Status.COMPLETED, 1.0),
    ]
    groups, excluded = groups_from_rollouts(rollouts)
    assert [(g.group_id, [s.reward for s in g.samples]) for g in groups] == [("a", [1.0, 0.0]), ("b", [1.0])]
    assert excluded == {"infra_error": 1, "timeout": 1, "agent_error": 1}
    items, stats = build_batch(groups, normalize_std=False)
    assert [item.advantage for item in items] == [0.5, -0.5]  # not [0.75, -0.25, -0.25, -0.25]
    assert stats.groups_skipped_small == 1


def test_constant_and_single_sample_groups_are_skipped_and_counted():
    groups = [_group("const", [1.0, 1.0, 1.0]), _group("single", [1.0]), _group("ok", [1.0, 0.0])]
    items, stats = build_batch(groups, normalize_std=False)
    assert {item.group_id for item in items} == {"ok"}
    assert stats.groups_total == 3
    assert stats.groups_used == 1
    assert stats.groups_skipped_constant == 1
    assert stats.groups_skipped_small == 1
    # the reward curve sees every scored rollout, skipped groups included
    assert stats.reward_mean == pytest.approx(5 / 6)
    assert stats.advantage_abs_mean == pytest.approx(0.5)


def test_a_forked_rollout_counts_once_and_its_traces_share_its_advantage():
    # rollout 0 forked into two traces; per rollout the mean is 1/3, per trace it would be 1/2
    group = _group("g", [1.0, 0.0, 0.0], traces_per_sample=[2, 1, 1])
    items, stats = build_batch([group], normalize_std=False)
    assert len(items) == 4
    assert [item.advantage for item in items if item.rollout_key == "g/0"] == pytest.approx([2 / 3, 2 / 3])
    assert [item.advantage for item in items if item.rollout_key != "g/0"] == pytest.approx([-1 / 3, -1 / 3])
    assert stats.rollouts_used == 3
    assert stats.traces_used == 4


def test_traces_without_trained_tokens_are_dropped_but_their_rollout_still_counts():
    empty = _trace(mask=(0, 0))
    group = TrainGroup(
        "g",
        (
            TrainSample("a", 1.0, (empty,)),
            TrainSample("b", 0.0, (_trace(),)),
            TrainSample("c", 0.0, (_trace(),)),
        ),
    )
    items, stats = build_batch([group], normalize_std=False)
    assert [item.rollout_key for item in items] == ["b", "c"]
    assert [item.advantage for item in items] == pytest.approx([-1 / 3, -1 / 3])
    assert stats.traces_dropped_empty == 1


def test_items_carry_old_logprobs_only_where_trained_and_the_oldest_version():
    trace = Trace(
        token_ids=(1, 2, 3, 4, 5),
        prompt_length=2,
        loss_mask=(1, 0, 1),
        logprobs=(-0.1, None, -0.3),
        finish_reason="stop",
        metadata={"policy_versions": [3, 2]},
    )
    group = TrainGroup("g", (TrainSample("a", 1.0, (trace,)), TrainSample("b", 0.0, (_trace(),))))
    items, stats = build_batch([group], normalize_std=False)
    assert items[0].old_logprobs == (-0.1, 0.0, -0.3)
    assert items[0].policy_version == 2
    assert items[0].trained_tokens == 2
    assert stats.trained_tokens == 5


# --- policy loss ------------------------------------------------------------------------------


def _loss(ratios, advantage, mask, **overrides):
    """Token ratios r as exp(logp - old) with old = 0; returns the output and d loss / d logp."""
    logprobs = torch.log(torch.tensor([ratios], dtype=torch.float32)).requires_grad_(True)
    kwargs = dict(clip_low=0.2, clip_high=0.2, tis_cap=None, kl_coef=0.0, ref_logprobs=None)
    kwargs.update(overrides)
    out = policy_loss(
        logprobs,
        torch.zeros_like(logprobs),
        torch.tensor([advantage]),
        torch.tensor([mask], dtype=torch.float32),
        **kwargs,
    )
    out.loss.backward()
    return out, logprobs.grad[0].tolist()


def test_ppo_clip_positive_advantage():
    # r = 1.5 is above 1.2: clipped, no gradient; r = 0.9 is inside: loss -A r, grad -A r / n
    out, grad = _loss([1.5, 0.9, 2.0], 1.0, [1, 1, 0])
    assert out.loss.item() == pytest.approx((-1.2 - 0.9) / 2)
    assert grad == pytest.approx([0.0, -0.9 / 2, 0.0])
    assert out.clipped_tokens == 1
    assert out.trained_tokens == 2


def test_ppo_clip_negative_advantage():
    # A = -1: r = 0.5 below 0.8 is clipped (loss 0.8, no gradient); r = 1.1 gives loss 1.1
    out, grad = _loss([0.5, 1.1], -1.0, [1, 1])
    assert out.loss.item() == pytest.approx((0.8 + 1.1) / 2)
    assert grad == pytest.approx([0.0, 1.1 / 2])
    assert out.clipped_tokens == 1


def test_truncated_importance_sampling():
    # value -A min(r, c), gradient -A min(r, c): truncated, never dropped
    out, grad = _loss([1.5, 0.9], 1.0, [1, 1], tis_cap=1.2)
    assert out.loss.item() == pytest.approx((-1.2 - 0.9) / 2)
    assert grad == pytest.approx([-1.2 / 2, -0.9 / 2])
    assert out.clipped_tokens == 1


def test_k3_kl_penalty_against_the_reference():
    ratios = [1.5, 0.9]
    k3 = [1 / r + math.log(r) - 1 for r in ratios]  # exp(ref - logp) - (ref - logp) - 1, ref = 0
    reference = torch.zeros(1, 2)
    out, grad = _loss(ratios, 0.0, [1, 1], kl_coef=0.1, ref_logprobs=reference)
    assert out.kl_sum == pytest.approx(sum(k3), rel=1e-5)
    assert out.loss.item() == pytest.approx(0.1 * sum(k3) / 2, rel=1e-5)
    # d k3 / d logp = 1 - exp(ref - logp) = 1 - 1 / r
    assert grad == pytest.approx([0.1 * (1 - 1 / r) / 2 for r in ratios], rel=1e-5)


def test_kl_penalty_without_reference_logprobs_is_an_error():
    with pytest.raises(ValueError, match="ref_logprobs"):
        _loss([1.0], 1.0, [1], kl_coef=0.1)


def test_sampler_kl_is_zero_on_policy_and_positive_off_policy():
    on, _ = _loss([1.0, 1.0], 1.0, [1, 1])
    off, _ = _loss([1.5, 1.0], 1.0, [1, 1])
    assert on.sampler_kl_sum == pytest.approx(0.0)
    assert off.sampler_kl_sum == pytest.approx(1 / 1.5 + math.log(1.5) - 1, rel=1e-5)


def _two_sequences(aggregation, rows=(0, 1), **totals):
    # on-policy (r = 1), so each token's loss is -A: sequence 0 = [-1, -1], sequence 1 = [3]
    logprobs = torch.zeros(2, 2)[list(rows)]
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])[list(rows)]
    advantages = torch.tensor([1.0, -3.0])[list(rows)]
    return policy_loss(
        logprobs, torch.zeros_like(logprobs), advantages, mask,
        clip_low=0.2, clip_high=0.2, tis_cap=None, kl_coef=0.0, ref_logprobs=None,
        aggregation=aggregation, **totals,
    ).loss.item()


@pytest.mark.parametrize(
    "aggregation, expected",
    [
        ("token_mean", (-1 - 1 + 3) / 3),
        ("seq_mean_token_mean", (-1 + 3) / 2),
        ("seq_mean_token_sum", (-2 + 3) / 2),
    ],
)
def test_aggregations(aggregation, expected):
    assert _two_sequences(aggregation) == pytest.approx(expected)
    # split into micro-batches with the whole batch's counts, the parts add up to the whole
    parts = _two_sequences(aggregation, rows=(0,), total_tokens=3, total_sequences=2) + _two_sequences(
        aggregation, rows=(1,), total_tokens=3, total_sequences=2
    )
    assert parts == pytest.approx(expected)


def test_unknown_aggregation_is_an_error():
    with pytest.raises(ValueError, match="token_mean"):
        _loss([1.0], 1.0, [1], aggregation="sum")


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"aggregation": "mean"}, "algo.aggregation"),
        ({"clip_low": 1.5}, "algo.clip_low"),
        ({"tis_cap": 0.0}, "algo.tis_cap"),
        ({"kl_coef": -1.0}, "algo.kl_coef"),
    ],
)
def test_bad_algo_config_names_the_key(changes, match):
    with pytest.raises(ConfigError, match=match):
        GRPOConfig(**changes)


def test_importing_trainers_does_not_import_torch():
    code = "import sys, agentcore_rl_harness.trainers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_one_group_builder_a_finished_rollout_without_a_reward_trains_on_its_success():
    from agentcore_rl_harness.run.training import build_groups

    passed = dataclasses.replace(_rollout("a", 0, Status.COMPLETED, None), success=True)
    failed = dataclasses.replace(_rollout("a", 1, Status.TASK_FAILED, None), success=False)
    lost = _rollout("c", 0, Status.TIMEOUT, None)
    groups, excluded = groups_from_rollouts([passed, failed, lost])
    assert [(g.group_id, [(s.rollout_key, s.reward) for s in g.samples]) for g in groups] == [
        ("a", [("a/0", 1.0), ("a/1", 0.0)])
    ]
    assert excluded == {"timeout": 1}
    loop_groups, loop_excluded = build_groups([passed, failed, lost])
    assert loop_groups == groups
    assert loop_excluded == {"timeout": 1, "agent_error": 0, "infra_error": 0, "task_error": 0,
                             "judge_error": 0, "limit_exceeded": 0}
