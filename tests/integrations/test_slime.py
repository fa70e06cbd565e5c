"""integrations/slime.py: slime samples from harness rollouts, per-group rewards, failure policy.

slime is not installed here (the PyPI `slime` is unrelated); the field names are checked against
slime's `Sample` as read at THUDM/slime commit 0d234f3e3a83c81b7d37209994e0b994deacbb24
(slime/utils/types.py), and the post-process / rollout-function contracts against
slime/ray/rollout.py (`custom_reward_post_process_func(args, samples) -> (raw, rewards)`) and
slime/rollout/base_types.py (`RolloutFnTrainOutput(samples: list[list[Sample]], metrics)`).
"""

import concurrent.futures
import dataclasses
import json
from types import SimpleNamespace

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.integrations import slime
from agentcore_rl_harness.integrations.export import slime_records
from agentcore_rl_harness.integrations._tasks import find_task
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.trainers.grpo import group_advantages

# slime.utils.types.Sample's dataclass fields at commit 0d234f3e (in declaration order).
SLIME_SAMPLE_FIELDS = [
    "group_index", "index", "prompt", "tokens", "multimodal_inputs", "multimodal_train_inputs",
    "response", "response_length", "label", "reward", "loss_mask", "weight_versions",
    "rollout_log_probs", "rollout_routed_experts", "remove_sample", "teacher_log_probs",
    "mopd_teacher_log_probs", "status", "metadata", "generate_function_path", "train_metadata",
    "session_id", "non_generation_time", "spec_info", "prefix_cache_info",
]
SLIME_STATUS_VALUES = {"pending", "completed", "truncated", "aborted", "failed"}


def test_stand_in_mirrors_slime_sample_names():
    names = [f.name for f in dataclasses.fields(slime.StandInSample)]
    assert set(names) <= set(SLIME_SAMPLE_FIELDS)
    assert [n for n in SLIME_SAMPLE_FIELDS if n in names] == names  # same relative order
    assert {s.value for s in slime.StandInSample.Status} == SLIME_STATUS_VALUES
    assert slime.sample_class() is slime.StandInSample  # slime is absent here


def test_forked_rollout_becomes_one_sample_per_trace(trace_factory, rollout_factory):
    first = trace_factory([1, 2, 3], [10, 11, 12], [1, 0, 1])
    second = trace_factory([1, 2, 3, 4], [20, 21], [1, 1], finish="length", logprob=-0.25)
    empty = trace_factory([1], [5], [0])
    rollout = rollout_factory([first, second, empty], reward=0.75, session_id="arl-abc")
    template = slime.StandInSample(group_index=7, index=3, prompt="p", label="r0",
                                   metadata={slime.META_KEY: {"task_ref": "x::y", "row": "{}"}})
    samples = slime.rollout_samples(rollout, template=template, group_index=7,
                                    sample_cls=slime.StandInSample, decode=lambda ids: f"<{len(ids)}>")
    assert len(samples) == 2  # the trace without a trained token is not a sample
    a, b = samples
    assert a.tokens == [1, 2, 3, 10, 11, 12] and a.response_length == 3
    assert a.loss_mask == [1, 0, 1] and a.rollout_log_probs == [-0.5, 0.0, -0.5]
    assert b.tokens == [1, 2, 3, 4, 20, 21] and b.response_length == 2 and b.loss_mask == [1, 1]
    assert b.rollout_log_probs == [-0.25, -0.25]
    assert a.status is slime.StandInSample.Status.COMPLETED
    assert b.status is slime.StandInSample.Status.TRUNCATED
    assert a.reward == b.reward == 0.75 and a.group_index == b.group_index == 7
    assert a.index == 3 and a.label == "r0" and a.prompt == "p" and a.response == "<3>"
    info_a, info_b = a.metadata[slime.META_KEY], b.metadata[slime.META_KEY]
    assert info_a["rollout_id"] == info_b["rollout_id"] == "arl-abc" == a.session_id
    assert (info_a["trace_index"], info_b["trace_index"]) == (0, 1)
    assert info_a["traces_in_rollout"] == 3 and info_a["task_ref"] == "x::y"
    for sample in samples:  # slime asserts this in _convert_samples_to_train_data
        assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs)


def _sample(group, rollout_id, reward):
    return slime.StandInSample(group_index=group, reward=reward,
                               metadata={slime.META_KEY: {"rollout_id": rollout_id}})


def test_post_process_counts_a_forked_rollout_once():
    samples = [_sample(0, "a", 1.0), _sample(0, "a", 1.0), _sample(0, "b", 0.0), _sample(0, "c", 0.0),
               _sample(1, "d", 2.0), _sample(1, "e", 4.0)]
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True,
                           grpo_std_normalization=True, reward_key=None)
    raw, rewards = slime.post_process_rewards(args, samples)
    assert raw == [1.0, 1.0, 0.0, 0.0, 2.0, 4.0]
    g0 = group_advantages([1.0, 0.0, 0.0], normalize_std=True)
    g1 = group_advantages([2.0, 4.0], normalize_std=True)
    assert rewards == pytest.approx([g0[0], g0[0], g0[1], g0[2], g1[0], g1[1]])
    no_std = SimpleNamespace(**{**vars(args), "grpo_std_normalization": False})
    centred = slime.post_process_rewards(no_std, samples)[1]
    assert centred == pytest.approx([2 / 3, 2 / 3, -1 / 3, -1 / 3, -1.0, 1.0])
    plain = SimpleNamespace(**{**vars(args), "advantage_estimator": "ppo"})
    assert slime.post_process_rewards(plain, samples) == (raw, raw)


def test_post_process_reads_reward_key():
    samples = [slime.StandInSample(group_index=0, reward={"acc": 1.0}),
               slime.StandInSample(group_index=0, reward={"acc": 0.0})]
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True,
                           grpo_std_normalization=False, reward_key="acc")
    assert slime.post_process_rewards(args, samples) == ([1.0, 0.0], [0.5, -0.5])


class _FakeRunner:
    """Stands in for RolloutRunner: scripted rollouts per submitted case, in order."""

    def __init__(self, rollouts, policy):
        self.rollouts = list(rollouts)
        self.cases = []
        self.tokenizer = None
        self.config = SimpleNamespace(trainer=SimpleNamespace(trainer=slime.SlimeTrainerConfig(failure_policy=policy)))
        self._index = 0

    def next_sample_index(self):
        self._index += 1
        return self._index

    def submit(self, case):
        self.cases.append(case)
        future = concurrent.futures.Future()
        future.set_result(self.rollouts[len(self.cases) - 1])
        return future


def _groups(toy_task_dir):
    spec = find_task("test_toy", root=toy_task_dir)
    record = slime_records(spec, [{"id": "r0", "split": "train", "question": "Say 0"}])[0]
    return [[slime.StandInSample(group_index=5, index=i, prompt=record["prompt"], label=record["label"],
                                 metadata=json.loads(json.dumps(record["metadata"]))) for i in range(3)]]


def test_drop_policy_leaves_failed_rollouts_out_and_counts_them(toy_task_dir, trace_factory, rollout_factory):
    trace = trace_factory([1, 2], [3, 4], [1, 1])
    rollouts = [rollout_factory([trace], reward=1.0, session_id="a"),
                rollout_factory([], reward=None, status=Status.AGENT_ERROR, session_id="b"),
                rollout_factory([trace, trace], reward=0.0, session_id="c")]
    runner = _FakeRunner(rollouts, "drop")
    groups, metrics = slime.play_groups(runner, _groups(toy_task_dir), rollout_id=4)
    assert [len(g) for g in groups] == [3]
    assert [s.metadata[slime.META_KEY]["rollout_id"] for s in groups[0]] == ["a", "c", "c"]
    assert {s.group_index for s in groups[0]} == {5}
    assert metrics["agentcore_rl/dropped_rollouts"] == 1.0 and metrics["agentcore_rl/traces"] == 3.0
    assert [case.row["id"] for case in runner.cases] == ["r0"] * 3
    assert {case.step for case in runner.cases} == {4} and runner.cases[0].spec.name == "test_toy"


def test_raise_policy_stops_the_step(toy_task_dir, trace_factory, rollout_factory):
    rollouts = [rollout_factory([], reward=None, status=Status.TIMEOUT, session_id=str(i)) for i in range(3)]
    with pytest.raises(HarnessError, match="timeout.*failure_policy=raise"):
        slime.play_groups(_FakeRunner(rollouts, "raise"), _groups(toy_task_dir), rollout_id=0)


def test_all_failed_under_drop_is_an_error_not_an_empty_batch(toy_task_dir, rollout_factory):
    rollouts = [rollout_factory([], reward=None, status=Status.INFRA_ERROR, session_id=str(i)) for i in range(3)]
    with pytest.raises(HarnessError, match="no rollout produced a trainable trace"):
        slime.play_groups(_FakeRunner(rollouts, "drop"), _groups(toy_task_dir), rollout_id=0)


def test_trainer_slime_composes():
    typed = compose_config(["trainer=slime", "trainer.failure_policy=raise"]).typed
    assert typed.trainer.trainer == slime.SlimeTrainerConfig(failure_policy="raise")
    assert "--rollout-function-path agentcore_rl_harness.integrations.slime.generate_rollout" in slime.EXTERNAL_COMMAND
