"""SIGKILL a real `pytest --agentcore-rl eval` mid-run, resume it, and get the uninterrupted result.

Excluded from the report comparison, and why (everything else must be equal):
- run.id: the run directory's name (`reference` vs `killed`), not content.
- run.started_at, run.wall_time_s: wall clock of the (resumed) session.
- elapsed_s, mean_elapsed_s (overall, per task, per tag): sums of rollout wall times; the agent
  sleeps and the machine is shared, so these are timings, not results.
Rollout records are compared the same way, without session_id (a fresh random key per session),
run_id (the directory name) and elapsed_s (wall time); sampled token ids must be identical, and
logprobs equal to 1e-4: they differ by ~1e-6 between any two runs (measured max 9.5e-7) because
the sampler's fp32 forward passes batch whichever rows are in flight together, and the reduction
order (batch shape, left padding, prefix-cache hits) is timing-dependent. The seeded per-row
generators keep the drawn tokens identical, so the report is identical.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from toy_project import even_length_task, rows, write_project

pytestmark = pytest.mark.slow



ROWS, SAMPLES = 6, 2
SETTINGS = ["model=tiny", "sampling.max_tokens=8", "runtime.concurrency=2", "seed=3",
            "report.progress=lines"]
REPORT_TIMING = {"elapsed_s", "mean_elapsed_s"}
RUN_TIMING = {"id", "started_at", "wall_time_s"}
RECORD_VOLATILE = {"session_id", "run_id", "elapsed_s"}


def _command(*extra):
    sets = [arg for setting in SETTINGS for arg in ("--agentcore-rl-set", setting)]
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
            *sets, *extra]


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


def _content(value):
    """The report without timing and ids (see the module docstring)."""
    if isinstance(value, dict):
        return {k: _content(v) for k, v in value.items() if k not in REPORT_TIMING}
    if isinstance(value, list):
        return [_content(v) for v in value]
    return value


def _report(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    report["run"] = {k: v for k, v in report["run"].items() if k not in RUN_TIMING}
    return _content(report)


def _by_key(records, *, tolerant=False):
    """Records by (task, row, sample), without volatile fields; `tolerant`: logprobs to 1e-4."""
    found = {}
    for record in records:
        content = {k: v for k, v in record.items() if k not in RECORD_VOLATILE}
        if tolerant:
            content["traces"] = [
                {**trace, "logprobs": [None if lp is None else pytest.approx(lp, abs=1e-4)
                                       for lp in trace["logprobs"]]}
                for trace in record["traces"]
            ]
        found[(record["task"], record["row_id"], record["sample_index"])] = content
    return found


def _kill_group(process):
    """SIGKILL what the killed pytest left behind (its agent processes), by its process group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, tiny_model_dir):
    # each agent sleeps 0.6 s: a few rollouts are in flight when the run is killed
    write_project(tmp_path, task=even_length_task(samples=SAMPLES), dataset=rows(ROWS, sleep=0.6))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    total = ROWS * SAMPLES

    reference = subprocess.run(_command("--agentcore-rl-out", "reference"), cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=900)
    assert reference.returncode == 0, reference.stdout[-3000:]
    assert len(_records(tmp_path / "reference")) == total

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
        _kill_group(process)
    assert process.returncode == -signal.SIGKILL
    survived = _records(killed_dir)
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

    final = _records(killed_dir)
    keys = [(r["task"], r["row_id"], r["sample_index"]) for r in final]
    assert len(keys) == len(set(keys)) == total  # no duplicates, nothing lost
    # what finished before the kill is kept as it was, not run again
    kept = {r["session_id"] for r in final}
    assert all(r["session_id"] in kept for r in survived)
    assert _by_key(final) == _by_key(_records(tmp_path / "reference"), tolerant=True)
    assert _report(killed_dir) == _report(tmp_path / "reference")
