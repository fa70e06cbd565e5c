"""`pytest -n N --agentcore-rl eval|collect` (sharding.py): real pytest-xdist workers, the tiny
model, real agents; one run directory and one report equal to a single process's."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from toy_project import (
    even_length_task, kill_group, read_records, records_by_key, report_content, rows, write_project,
)

from agentcore_rl_harness.sharding import shard_indices

pytest.importorskip("xdist", reason="pip install pytest-xdist")

ROWS, TRAIN_ROWS, SAMPLES = 3, 2, 2  # eval runs the test rows, collect the train rows
SETTINGS = ["model=tiny", "sampling.max_tokens=8", "seed=5", "report.progress=lines"]
# Collected first (file order): item 0, so worker gw0 dies before its other items finish.
CRASH_ONCE = '''
import os

def test_crash_once():
    if not os.path.exists("crashed"):
        open("crashed", "w").close()
        os._exit(1)  # the worker process dies mid-run, its rollouts in flight
'''


def _pytest(cwd, *extra, mode="eval", timeout=900):
    sets = [arg for setting in SETTINGS for arg in ("--agentcore-rl-set", setting)]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", mode,
               *sets, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        kill_group(process)  # a crashed worker's agent processes
    return process.returncode, output


def _testcases(run_dir):
    """junit.xml's testcases in order, without timings and session ids."""
    root = ET.parse(run_dir / "junit.xml").getroot()
    return [(case.get("classname"), case.get("name"), [child.tag for child in case])
            for case in root.iter("testcase")]


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_model_dir):
    """The toy project and its single-process reference run."""
    root = write_project(tmp_path_factory.mktemp("sharded"), task=even_length_task(samples=SAMPLES),
                         dataset=rows(TRAIN_ROWS + ROWS, train=TRAIN_ROWS))
    (root / "test_a_crash.py").write_text(CRASH_ONCE)
    (root / "crashed").touch()  # the reference does not crash
    code, output = _pytest(root, "--agentcore-rl-out", "reference")
    assert code == 0, output[-3000:]
    return root


def test_every_item_runs_on_exactly_one_worker():
    for count in (0, 1, 7, 12):
        for shards in (1, 2, 3):
            shares = [shard_indices(count, shard, shards) for shard in range(shards)]
            assert sorted(i for share in shares for i in share) == list(range(count))


@pytest.mark.slow
def test_two_workers_write_one_run_and_the_report_of_one_process(project):
    code, output = _pytest(project, "-n", "2", "--agentcore-rl-out", "two", "--junitxml", "user.xml")
    assert code == 0, output[-3000:]
    assert "rollouts from 2 pytest-xdist workers" in output
    run_dir, reference = project / "two", project / "reference"
    records = read_records(run_dir)  # one writer: every line whole, each rollout once
    keys = [(r["task"], r["row_id"], r["sample_index"]) for r in records]
    assert len(keys) == len(set(keys)) == ROWS * SAMPLES
    assert records_by_key(records) == records_by_key(read_records(reference), tolerant=True)
    assert report_content(run_dir) == report_content(reference)
    assert _testcases(run_dir) == _testcases(reference)
    assert not (run_dir / "gw0").exists() and sorted(p.name for p in run_dir.iterdir()) == sorted(
        p.name for p in reference.iterdir())
    # the user's own --junitxml (written by the controller) carries each item's rollout
    user = ET.parse(project / "user.xml").getroot()
    statuses = [prop.get("value") for prop in user.iter("property") if prop.get("name") == "status"]
    assert sorted(statuses) == sorted(r["status"] for r in records)


@pytest.mark.slow
def test_a_dead_worker_fails_the_run_keeps_what_it_sent_and_resume_finishes_it(project):
    (project / "crashed").unlink()
    code, output = _pytest(project, "-n", "2", "--agentcore-rl-out", "crashed-run")
    assert code == 1, output[-3000:]
    assert "worker gw0 stopped before its share of the items finished" in output
    assert "--agentcore-rl-resume" in output
    run_dir = project / "crashed-run"
    survived = read_records(run_dir)
    assert 0 < len(survived) < ROWS * SAMPLES  # gw1's share, not gw0's
    assert (run_dir / "report.json").is_file()  # what was collected is reported

    code, output = _pytest(project, "-n", "2", "--agentcore-rl-resume", str(run_dir))
    assert code == 0, output[-3000:]
    final = read_records(run_dir)
    keys = [(r["task"], r["row_id"], r["sample_index"]) for r in final]
    assert len(keys) == len(set(keys)) == ROWS * SAMPLES
    assert {r["session_id"] for r in survived} <= {r["session_id"] for r in final}  # kept, not rerun
    assert records_by_key(final) == records_by_key(read_records(project / "reference"), tolerant=True)
    assert report_content(run_dir) == report_content(project / "reference")


def test_run_mode_and_other_dist_modes_are_refused(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-n", "2", "--agentcore-rl", "run", "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentcore-rl run does not run under pytest-xdist*every group "
                                 "of every step must reach that trainer*"])
    result = pytester.runpytest("-n", "2", "--dist", "loadfile", "--agentcore-rl", "eval",
                                "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dist loadfile: under --agentcore-rl the harness shares the "
                                 "items among the workers itself*drop --dist or pass --dist load*"])
    assert not (pytester.path / "out").exists()


@pytest.mark.slow
def test_collect_under_two_workers_saves_every_rollout_once_as_parquet(project):
    from datasets import Dataset

    code, output = _pytest(project, "-n", "2", "--agentcore-rl-out", "collected", mode="collect")
    assert code == 0, output[-3000:]
    records = read_records(project / "collected")
    assert {(r["row_id"], r["sample_index"]) for r in records} == {
        (f"r{row}", sample) for row in range(TRAIN_ROWS) for sample in range(SAMPLES)}
    assert len(records) == TRAIN_ROWS * SAMPLES and {r["phase"] for r in records} == {"collect"}
    table = Dataset.from_parquet(str(project / "collected" / "rollouts.parquet"))
    assert sorted(zip(table["row_id"], table["sample_index"])) == sorted(
        (r["row_id"], r["sample_index"]) for r in records)
