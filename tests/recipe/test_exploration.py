"""`recipe/exploration.py` and `initial_kl.py`: a larger group when too few groups teach, and KL to
the initial policy on the first step's tokens."""

import math

from agentcore_rl_harness.recipe.config import RecipeConfig
from agentcore_rl_harness.recipe.exploration import Exploration
from agentcore_rl_harness.recipe.initial_kl import InitialKL, k3
from agentcore_rl_harness.records import Trace


def line(step, informative, success):
    return {"step": step, "informative_fraction": informative, "success_rate": success}


def test_few_informative_failing_groups_double_the_group_size_up_to_the_bound():
    exploration = Exploration(RecipeConfig(max_group_size=8), group_size=2, explicit=False)
    first = exploration.after_step(line(1, 0.0, 0.0))
    assert first.applied and first.value == 4 and first.at == "step 1" and "0% of groups informative" in first.reason
    assert exploration.after_step(line(2, 0.25, 0.1)).value == 8
    assert exploration.after_step(line(3, 0.0, 0.0)) is None  # at the bound
    assert exploration.group_size == 8


def test_informative_or_solved_groups_change_nothing_and_an_explicit_size_stays():
    exploration = Exploration(RecipeConfig(), group_size=4, explicit=False)
    assert exploration.after_step(line(1, 0.75, 0.4)) is None  # enough groups teach
    assert exploration.after_step(line(2, 0.0, 1.0)) is None  # constant because solved
    assert exploration.after_step(line(3, None, None)) is None
    kept = Exploration(RecipeConfig(), group_size=4, explicit=True)
    said = kept.after_step(line(1, 0.0, 0.0))
    assert not said.applied and said.value == 4 and "would choose 8" in said.reason
    assert kept.after_step(line(2, 0.0, 0.0)) is None and kept.group_size == 4  # said once


def test_under_a_time_budget_the_group_grows_only_where_two_larger_steps_fit():
    exploration = Exploration(RecipeConfig(), group_size=4, explicit=False)
    # 600 s left for training, this step took 100 s: two steps at 8 take ~400 s: room
    grown = exploration.after_step(line(1, 0.0, 0.0), room=(600.0, 100.0))
    assert grown.applied and grown.value == 8
    # now steps take 200 s; two at 16 would take ~800 s of the 700 left: the group stays at 8
    kept = exploration.after_step(line(2, 0.0, 0.0), room=(700.0, 200.0))
    assert not kept.applied and kept.value == 8 and exploration.group_size == 8
    assert "kept for the time budget" in kept.reason and "~800s" in kept.reason and "leaves 700s" in kept.reason
    assert exploration.after_step(line(3, 0.0, 0.0), room=(500.0, 200.0)) is None  # said once
    assert exploration.after_step(line(4, 0.0, 0.0), room=None).value == 16  # no budget: grows


def trace(logprobs, mask):
    return Trace(token_ids=tuple(range(2 + len(mask))), prompt_length=2, loss_mask=tuple(mask),
                 logprobs=tuple(logprobs), finish_reason="stop")


def test_kl_to_the_initial_policy_is_measured_on_the_first_tokens_it_was_shown():
    now = {"value": [(-1.0, None, -2.0)]}
    kl = InitialKL(2, lambda traces: now["value"] * len(traces))
    first = trace([-1.0, None, -2.0], [1, 0, 1])
    assert kl.measure([trace([None], [0]), first]) == 0.0  # same logprobs; a trace with no trained token is skipped
    now["value"] = [(-1.5, None, -2.0)]
    assert kl.measure([trace([-9.0], [1])]) == round(k3([-1.0, -2.0], [-1.5, -2.0]), 6)  # the first traces kept
    assert k3([-1.0], [-1.5]) == math.expm1(-0.5) + 0.5 > 0
    assert InitialKL(2, lambda traces: None).measure([first]) is None  # a trainer that cannot recompute
    assert InitialKL(0, lambda traces: []).measure([first]) is None
