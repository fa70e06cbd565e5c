"""`run/plan.py`: which cases each mode runs for a task, and how they are named and matched."""

import pytest
from run_fakes import FAST, make_spec

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError, HarnessError
from agentcore_rl_harness.records import Rollout, Status
from agentcore_rl_harness.run.cases import Case
from agentcore_rl_harness.run.plan import TrainItem, case_key, item_name, item_split, plan_cases


def _config(*overrides):
    return compose_config([*FAST, *overrides]).typed


def test_eval_is_test_rows_times_samples(tmp_path):
    spec = make_spec(tmp_path, samples=2, test=2, train=1)
    cases = plan_cases(spec, mode="eval", config=_config())
    assert [(c.row_id, c.sample_index, c.phase) for c in cases] == [
        ("r1", 0, "eval"), ("r1", 1, "eval"), ("r2", 0, "eval"), ("r2", 1, "eval")]
    assert [item_name(c) for c in cases] == ["r1-s0", "r1-s1", "r2-s0", "r2-s1"]


@pytest.mark.parametrize("mode,split,phase", [("collect", "train", "collect"), ("run", "test", "post")])
def test_each_mode_has_its_split_and_phase(tmp_path, mode, split, phase):
    spec = make_spec(tmp_path, samples=1, test=1, train=2)
    cases = plan_cases(spec, mode=mode, config=_config())
    assert item_split(mode, _config()) == split
    assert {c.phase for c in cases} == {phase} and len(cases) == (2 if split == "train" else 1)


def test_eval_settings_cap_rows_and_set_samples(tmp_path):
    spec = make_spec(tmp_path, samples=4, test=5)
    cases = plan_cases(spec, mode="eval", config=_config("eval.max_rows=2", "eval.samples=3"))
    assert len(cases) == 6 and {c.row_id for c in cases} == {"r0", "r1"}


def test_train_mode_is_one_item_per_task(tmp_path):
    spec = make_spec(tmp_path)
    (item,) = plan_cases(spec, mode="train", config=_config())
    assert item == TrainItem(spec) and item_name(item) == "train"


def test_a_split_without_rows_and_an_oracle_without_answers_are_refused(tmp_path):
    spec = make_spec(tmp_path, test=0, train=2)
    with pytest.raises(HarnessError, match="has no 'test' rows"):
        plan_cases(spec, mode="eval", config=_config())
    with pytest.raises(ConfigError, match="oracle"):
        plan_cases(make_spec(tmp_path, name="other"), mode="eval", config=_config("agent=oracle"))


def test_a_case_and_its_record_share_a_key(tmp_path):
    case = Case(spec=make_spec(tmp_path), row={"id": "r3"}, sample_index=2, phase="eval")
    record = Rollout(run_id="x", task="toy", row_id="r3", sample_index=2, group_id="g", phase="eval", step=None,
                     session_id="s", status=Status.COMPLETED, error=None, reward=None, rewards={}, success=True,
                     result=None, turns=0, usage=None, elapsed_s=0.0, traces=())
    assert case_key(case) == case_key(record) == ("toy", "r3", 2)
