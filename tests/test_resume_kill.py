"""SIGKILL a real `pytest --agentcore-rl eval` mid-run, resume it, and get the uninterrupted result.

The report and records are compared without timings and ids: `toy_project.report_content` and
`records_by_key` say what is left out and why.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from toy_project import (
    even_length_task, kill_group, read_records, records_by_key, report_content, rows, write_project,
)

pytestmark = pytest.mark.slow

ROWS, SAMPLES = 6, 2
SETTINGS = ["model=tiny", "sampling.max_tokens=8", "runtime.concurrency=2", "seed=3",
            "report.progress=lines"]


def _command(*extra):
    sets = [arg for setting in SETTINGS for arg in ("--agentcore-rl-set", setting)]
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
            *sets, *extra]


def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, tiny_model_dir):
    # each agent sleeps 0.6 s: a few rollouts are in flight when the run is killed
    write_project(tmp_path, task=even_length_task(samples=SAMPLES), dataset=rows(ROWS, sleep=0.6))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    total = ROWS * SAMPLES

    reference = subprocess.run(_command("--agentcore-rl-out", "reference"), cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=900)
    assert reference.returncode == 0, reference.stdout[-3000:]
    assert len(read_records(tmp_path / "reference")) == total

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(_command("--agentcore-rl-out", "killed"), cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    rollouts, deadline = killed_dir / "rollouts.jsonl", time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            if rollouts.is_file() and rollouts.read_text().count("\n") >= 3:
                break
            assert process.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)  # the pytest process itself: no cleanup, no report
        process.wait(timeout=60)
    finally:
        kill_group(process)
    assert process.returncode == -signal.SIGKILL
    survived = read_records(killed_dir)
    assert 3 <= len(survived) < total, "kill the run while some rollouts are still missing"
    assert not (killed_dir / "report.json").exists()
    # a kill during a write leaves a torn last line: the resume must drop it, not fail on it
    with open(rollouts, "a", encoding="utf-8") as handle:
        handle.write('{"schema_version": 1, "run_id": "killed", "task": "test_')

    # config.yaml of the run holds its settings: resuming needs nothing but the directory
    resumed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
         "--agentcore-rl-resume", "killed"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"{len(survived)} finished rollouts kept" in resumed.stdout

    final = read_records(killed_dir)
    keys = [(r["task"], r["row_id"], r["sample_index"]) for r in final]
    assert len(keys) == len(set(keys)) == total  # no duplicates, nothing lost
    # what finished before the kill is kept as it was, not run again
    kept = {r["session_id"] for r in final}
    assert all(r["session_id"] in kept for r in survived)
    assert records_by_key(final) == records_by_key(read_records(tmp_path / "reference"), tolerant=True)
    assert report_content(killed_dir) == report_content(tmp_path / "reference")
