"""`judged.py`: declaring a judged reward, and the mistakes a task author makes first."""

import pytest

import agentcore_rl_harness as arl


def test_a_bare_decorator_says_to_give_the_rubric():
    with pytest.raises(TypeError, match=r"@judge_reward on 'helpful' needs its rubric: write @arl.judge_reward\(rubric="):
        @arl.judge_reward
        def helpful(rollout, row):
            return "text"


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give the rubric the judge scores against"),
    ({"rubric": "  "}, "give the rubric the judge scores against"),
    ({"rubric": "r", "group": "yes"}, r"group='yes'\): True \(judge the group together\) or False"),
])
def test_a_missing_rubric_or_a_bad_group_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        arl.judge_reward(**kwargs)


def test_a_decorated_function_names_the_reward_and_gives_the_transcript():
    @arl.judge_reward(rubric="r", weight=0.5, group=True)
    def plan_quality(rollout, row):
        return f"plan for {row['id']}"

    assert (plan_quality.name, plan_quality.weight, plan_quality.group) == ("plan_quality", 0.5, True)
    assert plan_quality.transcript(None, {"id": "r1"}) == "plan for r1"
    assert arl.judge_reward(rubric="r").name == "judge"
    with pytest.raises(TypeError, match="list it in @arl.task"):
        plan_quality(None, {})
