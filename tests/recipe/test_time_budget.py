"""`recipe/budget.py`: with a constructed clock, training stops exactly when finishing one more
step (the longest of the last two steps) plus the final evaluation would overrun the budget, not
before; at least one step trains; the warm-up stops at its share; bad budgets are refused."""

import pytest

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.recipe.budget import TimeBudget
from agentcore_rl_harness.recipe.config import RecipeConfig


class Clock:
    def __init__(self, at=1000.0):
        self.at = at

    def __call__(self):
        return self.at


def budget(minutes, *, eval_s=0.0, clock=None):
    clock = clock or Clock()
    made = TimeBudget(minutes, started=clock.at, clock=clock, eval_s=eval_s)
    return made, clock


def steps_trained(made, clock, walls, *, steps):
    """Steps of the given walls until the budget's choice (or the last); (steps trained, choice)."""
    assert made.training_starts() is None
    for step, wall in enumerate(walls, start=1):
        clock.at += wall
        choice = made.after_step(step=step, steps=steps)
        if choice is not None or step == steps:
            return step, choice
    raise AssertionError("ran out of walls")


def test_it_stops_exactly_when_one_more_step_and_the_evaluation_would_overrun():
    # 10 min = 600 s, an evaluation of 100 s, steps of 100 s: after step 4, 400 + 100 + 100 = 600
    # still fits (not before); after step 5 one more would end at 700: stop after 5
    made, clock = budget(10, eval_s=100.0)
    trained, choice = steps_trained(made, clock, [100.0] * 20, steps=20)
    assert (trained, choice.key, choice.value, choice.applied, choice.at) == (5, "trainer.steps", 5, True, "step 5")
    assert choice.reason == (
        "training stopped early for the time budget after 5 of trainer.steps=20 steps: 500s elapsed + 100s for "
        "one more step (the longest of the last 2) + 100s for the final evaluation (the longest evaluation before training) "
        "> the budget of 600s (recipe.time_budget_min=10)")


def test_no_budget_choice_before_the_budget_is_near():
    made, clock = budget(60)
    trained, choice = steps_trained(made, clock, [10.0] * 30, steps=30)
    assert (trained, choice) == (30, None)  # 300 s of 3600: every step trains


def test_the_step_estimate_is_the_longest_of_the_last_two_steps():
    made, clock = budget(15)  # 900 s
    # a slow first step (400 s) is forgotten two steps later: 800 + 100 = 900 after step 5 fits,
    # 900 + 100 after step 6 does not (the longest of all steps would have stopped after step 3)
    trained, choice = steps_trained(made, clock, [400.0] + [100.0] * 10, steps=20)
    assert trained == 6 and "900s elapsed + 100s for one more step" in choice.reason
    made, clock = budget(10)
    made.training_starts()
    clock.at += 100
    assert made.after_step(step=1, steps=9) is None
    clock.at += 300  # 400 elapsed, one more ~300: 700 > 600
    assert "300s for one more step" in made.after_step(step=2, steps=9).reason


def test_time_before_training_counts_and_a_step_that_just_fits_goes_on():
    made, clock = budget(10, eval_s=50.0)
    clock.at += 200  # the pre-evaluation and the warm-up
    assert made.training_starts() is None
    clock.at += 100
    assert made.after_step(step=1, steps=5) is None  # 300 + 100 + 50 = 450
    clock.at += 100
    assert made.after_step(step=2, steps=5) is None  # 400 + 100 + 50 = 550
    clock.at += 50
    assert made.after_step(step=3, steps=5) is None  # 450 + 100 + 50 = 600: exactly the budget still fits
    clock.at += 100
    assert made.after_step(step=4, steps=5).value == 4  # 550 + 100 + 50 > 600
    assert made.step_walls == [100, 100, 50, 100]


def test_the_last_step_needs_no_choice_and_a_spent_budget_still_trains_one_step():
    made, clock = budget(1)
    made.training_starts()
    clock.at += 1000
    assert made.after_step(step=3, steps=3) is None  # the last step anyway
    made, clock = budget(1, eval_s=30.0)
    clock.at += 45  # 45 + 30 >= 60 before the first step
    warning = made.training_starts()
    assert "THE TIME BUDGET IS SPENT BEFORE TRAINING" in warning and "training ONE step" in warning
    assert "recipe.time_budget_min=1" in warning
    clock.at += 5
    assert made.after_step(step=1, steps=10).value == 1


def test_the_warm_up_starts_no_chunk_that_would_take_it_past_its_share():
    made, clock = budget(10)  # 600 s: a share of 0.4 is 240 s
    share = made.warm_up(0.4)
    clock.at += 30  # the first probe and the demonstrations
    assert share.spent() is None  # no chunk measured yet: the first one runs
    clock.at += 100  # chunk 1 and its probe: 130 + 100 <= 240
    assert share.spent() is None
    clock.at += 100  # chunk 2: 230 + 100 > 240
    why = share.spent()
    assert why == ("stopped at the time budget: the warm-up took 230s, and one more chunk (~100s) would take it past "
                   "recipe.warmup_budget_share=0.4 of the budget of 600s (recipe.time_budget_min=10)")
    made, clock = budget(10)
    share = made.warm_up(0.4)
    clock.at += 241  # the probe alone took more than the share
    assert share.spent().startswith("stopped at the time budget: the warm-up took 241s")


def test_no_budget_is_the_default_and_a_budget_must_be_positive_under_recipe_auto():
    assert RecipeConfig().time_budget_min is None
    RecipeConfig(time_budget_min=0.5).validate()
    for bad in (0, -3.0):
        with pytest.raises(ConfigError, match=r"recipe.time_budget_min=.* must be a number of minutes > 0 \(e.g. "):
            RecipeConfig(time_budget_min=bad).validate()
    with pytest.raises(ConfigError, match="recipe=none chooses nothing: use recipe=auto"):
        RecipeConfig(kind="none", time_budget_min=20).validate()
    with pytest.raises(ConfigError, match="recipe.warmup_budget_share=1.5 must be a fraction"):
        RecipeConfig(warmup_budget_share=1.5).validate()


def test_a_bad_budget_is_refused_when_the_config_is_composed():
    from agentcore_rl_harness.config import compose_config

    assert compose_config(["recipe.time_budget_min=20"]).typed.recipe.time_budget_min == 20
    with pytest.raises(ConfigError, match=r"recipe.time_budget_min=0.0 must be a number of minutes > 0"):
        compose_config(["recipe.time_budget_min=0"])
    with pytest.raises(ConfigError, match="recipe=none chooses nothing"):
        compose_config(["recipe=none", "recipe.time_budget_min=20"])


def test_room_is_what_the_budget_leaves_for_training_after_the_final_evaluation():
    made, clock = budget(10, eval_s=100.0)
    assert made.room() is None  # no step measured yet
    made.training_starts()
    clock.at += 150.0
    made.after_step(step=1, steps=5)
    left, wall = made.room()
    assert wall == 150.0 and left == 600 - 150 - 100
