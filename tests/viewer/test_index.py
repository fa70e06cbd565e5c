"""viewer/index.py: the byte-offset index of rollouts.jsonl, its tail, its filters."""

import json

from agentcore_rl_harness.store import RunStore
from agentcore_rl_harness.viewer.index import Filter, RunIndex, summary_fields

from viewer_runs import HOSTILE, rollout


def test_rows_are_indexed_in_file_order_without_their_traces(run_dir):
    index = RunIndex(run_dir)
    assert index.refresh() == 7
    rows = index.rows()
    assert [row.phase for row in rows] == ["demo", "pre", "pre", "pre", "post", "post", "post"]
    assert rows[0].demo and not rows[1].demo
    assert rows[1].status == "task_failed" and rows[1].failed and rows[1].rewards["exact"] == 0.0
    assert rows[2].tokens > 0 and rows[2].turns == 2
    record = index.record(3)
    assert record["result"]["html"] == HOSTILE and len(record["traces"][0]["token_ids"]) > 40


def test_filters_pick_failures_phase_and_search(run_dir):
    index = RunIndex(run_dir)
    index.refresh()
    failures = index.page(Filter(outcome="failure"))
    assert [row.number for row in failures.rows] == [1, 3, 6] and failures.total == 7
    assert [row.number for row in index.page(Filter(phase="post", outcome="success")).rows] == [4, 5]
    assert [row.number for row in index.page(Filter(search="ALERT(1)")).rows] == [3]
    assert [row.number for row in index.page(Filter(search="assertionerror")).rows] == [1, 3, 6]
    paged = index.page(Filter(), start=5, limit=10)
    assert [row.number for row in paged.rows] == [5, 6] and paged.matched == 7


def test_refresh_reads_only_the_new_tail_and_waits_for_a_whole_line(run_dir, tiny_tokenizer):
    index = RunIndex(run_dir)
    index.refresh()
    first = index.rows()
    store = RunStore(run_dir)
    store.append(rollout(tiny_tokenizer, 7, phase="post", row_id="late"))
    assert index.refresh() == 8
    assert index.rows()[:7] == first and index.rows()[7].row_id == "late"
    line = json.dumps(rollout(tiny_tokenizer, 8, row_id="torn").to_json())
    with open(run_dir / "rollouts.jsonl", "a") as handle:
        handle.write(line[:100])  # a write in progress
    assert index.refresh() == 8
    with open(run_dir / "rollouts.jsonl", "a") as handle:
        handle.write(line[100:] + "\n")
    assert index.refresh() == 9 and index.record(8)["row_id"] == "torn"
    store.close()


def test_a_rewritten_file_is_indexed_again(run_dir, tiny_tokenizer):
    index = RunIndex(run_dir)
    index.refresh()
    store = RunStore(run_dir)
    kept = [rollout(tiny_tokenizer, 1, row_id="kept")]
    store.rewrite(kept, [])  # what a resume does: rollouts.jsonl replaced by a shorter one
    store.close()
    assert index.refresh() == 1 and index.rows()[0].row_id == "kept"


def test_the_traces_cut_finds_the_top_level_key_only():
    record = {"status": "completed", "result": {"note": 'x, "traces": [', "a": 1, "traces": [1]},
              "traces": [{"token_ids": [1], "metadata": {"z": 0, "traces": [2]}}]}
    line = json.dumps(record).encode()
    summary = summary_fields(line)
    assert summary["result"] == record["result"] and "traces" not in summary


def test_a_corrupt_line_is_reported_and_the_rest_indexed(run_dir):
    with open(run_dir / "rollouts.jsonl", "a") as handle:
        handle.write('{"not": "a rollout"}\n')
    index = RunIndex(run_dir)
    assert index.refresh() == 7
    assert len(index.bad_lines) == 1 and "not a rollout record" in index.bad_lines[0]


def test_an_unknown_outcome_is_refused_naming_the_choices():
    import pytest

    from agentcore_rl_harness.errors import HarnessError

    with pytest.raises(HarnessError, match="outcome='failed' is not one of all, success, failure"):
        Filter(outcome="failed")


def test_the_demo_phase_is_the_warm_ups():
    from agentcore_rl_harness.run.cases import DEMO_PHASE
    from agentcore_rl_harness.viewer.index import DEMO_PHASE as SHOWN

    assert SHOWN == DEMO_PHASE
