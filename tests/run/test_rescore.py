"""`run/rescore.py`: recorded rollouts scored again by the tasks as they are now, without agents;
the new run sits beside the old one and `report compare` pairs them."""

import json

import pytest
import yaml

import agentcore_rl_harness as arl
from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.reports.compare import compare_runs
from agentcore_rl_harness.run.rescore import rescore
from agentcore_rl_harness.tasks import task_spec

from run_fakes import write_rows


def spec_with(tmp_path, reward, body=None):
    dataset = tmp_path / "toy.jsonl"
    if not dataset.exists():
        write_rows(dataset, test=3)

    def test_toy(rollout, row):
        assert rollout.reward == 1.0, f"reward {rollout.reward}"

    return task_spec(arl.task(dataset=str(dataset), samples=1, rewards=[arl.reward(reward)], name="toy")(body or test_toy))


def record(row_id, reply, *, status=Status.COMPLETED, success=True):
    trace = Trace(token_ids=(1, 2, 3), prompt_length=2, loss_mask=(1,), logprobs=(-0.1,), finish_reason="stop")
    return Rollout(run_id="old", task="toy", row_id=row_id, sample_index=0, group_id=f"toy/{row_id}/eval",
                   phase="eval", step=None, session_id=f"s-{row_id}", status=status, error=None,
                   reward=1.0 if success else 0.0, rewards={}, success=success, result={"reply": reply},
                   turns=1, usage=Usage(5, 1), elapsed_s=0.5, traces=(trace,))


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(compose_config(["model=tiny"]).resolved))
    (run / "run.json").write_text(json.dumps({"mode": "eval", "overrides": ["model=tiny"]}))
    records = [record("r0", "4"), record("r1", "four"),
               record("r2", "", status=Status.AGENT_ERROR, success=False)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    return run


def said_4(rollout, row):
    return float(rollout.result["reply"] == "4")


def said_a_four(rollout, row):
    return float(rollout.result["reply"] in ("4", "four"))


def test_rollouts_are_scored_again_beside_the_old_run_and_compare_pairs_them(tmp_path, run_dir):
    lines = []
    first = rescore(run_dir, {"toy": spec_with(tmp_path, said_4)}, write=lines.append)
    assert first.out_dir.parent == run_dir and first.out_dir.name.startswith("rescore-")
    records = [json.loads(line) for line in (first.out_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["row_id"], r["status"], r["reward"], r["rewards"]) for r in records] == [
        ("r0", "completed", 1.0, {"said_4": 1.0}),
        ("r1", "task_failed", 0.0, {"said_4": 0.0}),
        ("r2", "agent_error", 0.0, {}),  # the agent did not finish: kept as recorded
    ]
    assert records[1]["error"].startswith("AssertionError: reward 0.0\n") and records[1]["traces"] == [record("r1", "").traces[0].to_json()]
    assert (first.rescored, first.kept, first.changed) == (2, 1, 1)
    assert json.loads((first.out_dir / "rescore.json").read_text())["changed"] == 1
    assert {p.name for p in first.out_dir.iterdir()} >= {"report.json", "report.md", "report.html", "junit.xml"}
    assert "1 changed" in lines[0] and f"agentcore-rl report compare {run_dir} {first.out_dir}" in lines[1]

    second = rescore(run_dir, {"toy": spec_with(tmp_path, said_a_four)}, write=lines.append)
    comparison = compare_runs(first.out_dir, second.out_dir)
    assert comparison.overall.pairs == 3 and comparison.overall.improved == 1 and comparison.overall.regressed == 0
    assert compare_runs(run_dir, first.out_dir).overall.regressed == 1  # the old scoring passed r1


def test_a_missing_run_dir_a_vanished_task_and_a_vanished_row_are_clear_errors(tmp_path, run_dir):
    spec = spec_with(tmp_path, said_4)
    with pytest.raises(HarnessError, match="is not a run directory .* give the directory a run wrote"):
        rescore(tmp_path / "nowhere", {"toy": spec})
    with pytest.raises(HarnessError, match=r"recorded task\(s\) \['toy'\] that no longer exist under tasks/ "
                                           r"\(tasks found there: \['other'\]\); pass --tasks"):
        rescore(run_dir, {"other": spec}, tasks_label="tasks/")
    write_rows(tmp_path / "toy.jsonl", test=1)  # r1, r2 are gone from the dataset
    with pytest.raises(HarnessError, match=r"2 recorded row\(s\) are no longer in their task's dataset \(toy/r1, toy/r2\)"):
        rescore(run_dir, {"toy": spec})
    assert not [p for p in run_dir.iterdir() if p.name.startswith("rescore-")]  # nothing half-written


def test_a_task_that_inspects_files_needs_the_kept_states(tmp_path, run_dir):
    def test_files(rollout, row, sandbox):
        pass

    spec = spec_with(tmp_path, said_4, body=test_files)
    with pytest.raises(HarnessError, match=r"task toy inspects its session's files .* kept no final state for any "
                                           r"of its 2 rollouts \(the run directory has no states/s-r0.tar.gz .*"
                                           r"runtime.keep_final_state=true"):
        rescore(run_dir, {"toy": spec})
