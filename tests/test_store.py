import json

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.store import RunStore, read_json_lines, read_rollouts


def make_rollout(row_id="r1", **changes):
    base = dict(
        run_id="run", task="t", row_id=row_id, sample_index=0, group_id=f"t/{row_id}/eval",
        phase="eval", step=None, session_id="arl-x", status=Status.COMPLETED, error=None,
        reward=1.0, rewards={"ok": 1.0}, success=True, result={"answer": 3}, turns=1,
        usage=Usage(prompt_tokens=5, completion_tokens=2), elapsed_s=0.5,
        traces=(Trace(token_ids=(1, 2, 3, 4), prompt_length=2, loss_mask=(1, 1),
                      logprobs=(-0.1, -0.2), finish_reason="stop"),),
    )
    base.update(changes)
    return Rollout(**base)


def test_append_is_flushed_and_round_trips(tmp_path):
    store = RunStore(tmp_path / "run")
    store.append(make_rollout("a"))
    # visible to another reader before close: a killed run keeps what finished
    assert [r.row_id for r in read_rollouts(tmp_path / "run")] == ["a"]
    store.append(make_rollout("b", status=Status.TIMEOUT, success=False, reward=None))
    store.close()
    rollouts = read_rollouts(tmp_path / "run")
    assert rollouts[1].status is Status.TIMEOUT
    assert rollouts[0] == make_rollout("a")


def test_torn_last_line_is_ignored_but_corruption_is_not(tmp_path):
    store = RunStore(tmp_path)
    store.append(make_rollout("a"))
    store.close()
    path = tmp_path / "rollouts.jsonl"
    with open(path, "a") as f:
        f.write('{"schema_version": 1, "run_id"')
    assert len(read_rollouts(tmp_path)) == 1
    path.write_text("not json\n" + json.dumps(make_rollout().to_json()) + "\n")
    with pytest.raises(HarnessError, match="rollouts.jsonl:1"):
        read_rollouts(tmp_path)


def test_reopening_after_a_torn_write_appends_on_a_fresh_line(tmp_path):
    store = RunStore(tmp_path)
    store.append(make_rollout("a"))
    store.close()
    with open(tmp_path / "rollouts.jsonl", "a") as f:
        f.write('{"schema_version": 1, "run_id"')  # SIGKILL in the middle of a write
    store = RunStore(tmp_path)  # a resumed run
    store.append(make_rollout("b"))
    store.close()
    assert [r.row_id for r in read_rollouts(tmp_path)] == ["a", "b"]


def test_json_lines_being_written_or_cut_short_are_skipped_and_no_file_is_no_lines(tmp_path):
    path = tmp_path / "usage.jsonl"
    assert read_json_lines(path) == []
    path.write_text('{"step": 0}\n{"step": 1, "lo\n{"step": 2}\n{"step": 3')
    assert read_json_lines(path) == [{"step": 0}, {"step": 2}]


def test_trace_invariants_are_enforced():
    with pytest.raises(ValueError, match="inconsistent trace"):
        Trace(token_ids=(1, 2, 3), prompt_length=1, loss_mask=(1,), logprobs=(0.0, 0.0),
              finish_reason="stop")
    with pytest.raises(ValueError, match="must carry its sampled logprob"):
        Trace(token_ids=(1, 2), prompt_length=1, loss_mask=(1,), logprobs=(None,),
              finish_reason="stop")


def test_missing_run_dir_is_a_clear_error(tmp_path):
    with pytest.raises(HarnessError, match="is .* a run directory"):
        read_rollouts(tmp_path / "nope")


def test_a_value_json_cannot_hold_fails_that_rollout_and_never_raises(tmp_path):
    store = RunStore(tmp_path)
    bad = make_rollout("nan", result={"score": float("nan"), "ok": [1, float("-inf")]},
                       reward=float("inf"), rewards={"ok": 1.0, "judge": float("nan")})
    written = store.append(bad)
    store.append(make_rollout("after"))
    store.close()
    assert written.status is Status.TASK_FAILED and written.success is False
    assert written.reward is None and written.rewards == {"ok": 1.0}
    for said in ("reward = inf", "rewards['judge'] = nan", "result.score = nan", "result.ok[1] = -inf"):
        assert said in written.error
    rollouts = read_rollouts(tmp_path)
    assert [r.row_id for r in rollouts] == ["nan", "after"]
    assert rollouts[0] == written
    assert rollouts[0].result == {"score": "nan", "ok": [1, "-inf"]}  # kept, as text
    assert rollouts[0].traces == written.traces  # the sampled tokens are not lost


def test_objects_and_lone_surrogates_are_stored_as_text_and_failures_keep_their_status(tmp_path):
    store = RunStore(tmp_path)
    written = store.append(make_rollout("x", status=Status.AGENT_ERROR, success=False,
                                        error="agent said no", result={"o": object(), "s": "\ud800"}))
    store.close()
    assert written.status is Status.AGENT_ERROR  # a failure stays the failure it was
    assert written.error.startswith("agent said no; ")
    assert "result.o is a object object" in written.error and "result.s has a lone surrogate" in written.error
    assert read_rollouts(tmp_path)[0].result["s"] == "\\ud800"


def test_numpy_numbers_are_plain_numbers_not_failures(tmp_path):
    import numpy as np

    store = RunStore(tmp_path)
    written = store.append(make_rollout("np", result={"x": np.float32(0.5), "n": np.int64(3)}))
    store.close()
    assert written.status is Status.COMPLETED and written.error is None
    assert read_rollouts(tmp_path)[0].result == {"x": 0.5, "n": 3}


def test_parquet_holds_any_mix_of_result_types(tmp_path):
    import datasets

    from agentcore_rl_harness.store import write_parquet

    results = [{"answer": 3}, {"answer": "three"}, {"answer": [3, "x"]}, None, {"other": {"k": 1}}]
    rollouts = [make_rollout(f"r{i}", result=result) for i, result in enumerate(results)]
    path = write_parquet(tmp_path, rollouts)
    loaded = datasets.Dataset.from_parquet(str(path))
    assert len(loaded) == len(results)
    assert [json.loads(text) for text in loaded["result"]] == results
    assert loaded[0]["traces"][0]["token_ids"] == [1, 2, 3, 4]
    assert json.loads(loaded[0]["traces"][0]["metadata"]) == {}
    assert json.loads(loaded[0]["rewards"]) == {"ok": 1.0}


def test_parquet_of_rollouts_with_no_rewards_and_no_traces(tmp_path):
    import datasets

    from agentcore_rl_harness.store import write_parquet

    rollouts = [make_rollout(f"r{i}", rewards={}, reward=None, traces=(), result=None)
                for i in range(2)]
    loaded = datasets.Dataset.from_parquet(str(write_parquet(tmp_path, rollouts)))
    assert loaded["rewards"] == ["{}", "{}"] and loaded["traces"] == [[], []]
