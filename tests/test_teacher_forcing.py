"""agent=oracle with a `_script` oracle runs the task's own agent, teacher-forced through the
gateway: an end-state task through pytester (real local sessions, real tools, real sandbox). The
same run's kept final files then serve `agentcore-rl rescore` (a real subprocess)."""

import json
import shutil
import stat
import subprocess
import sys

import pytest

import notes_project

pytestmark = pytest.mark.slow


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_scripted_oracle_reaches_the_end_state_and_rescore_reads_its_kept_files(pytester, tiny_model_dir):
    notes_project.write(pytester.path)
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=oracle",
        "--agentcore-rl-out", "oracle", timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=2)
    for record in _records(pytester.path / "oracle" / "rollouts.jsonl"):
        assert record["status"] == "completed" and record["reward"] == 1.0
        assert record["result"] == {"reply": "Done."} and record["turns"] == 2
        (trace,) = record["traces"]
        assert trace["metadata"]["teacher_forced"] and trace["metadata"]["tool_calls"] == 1
        assert sum(trace["loss_mask"]) == record["usage"]["completion_tokens"] > 0
        kept = pytester.path / "oracle" / "states" / f"{record['session_id']}.tar.gz"
        assert kept.is_file() and stat.S_IMODE(kept.stat().st_mode) == 0o600

    # A stricter reward, scored on the same rollouts: the kept files are read again, no agent runs.
    tasks = pytester.path / "test_notes.py"
    tasks.write_text(tasks.read_text().replace('found.stdout == row["text"]', 'found.stdout == row["text"].upper()'))
    rescored = cli(pytester.path, "rescore", "oracle", "--tasks", ".")
    assert rescored.returncode == 0, rescored.stderr
    assert "2 rollouts scored again (2 changed), 0 kept as recorded" in rescored.stdout
    (out,) = [p for p in (pytester.path / "oracle").iterdir() if p.name.startswith("rescore-")]
    records = _records(out / "rollouts.jsonl")
    assert all(r["status"] == "task_failed" and r["reward"] == 0.0 for r in records)
    assert all("holds 'note number" in r["error"] for r in records)  # the body read the restored file
    compared = cli(pytester.path, "report", "compare", "oracle", str(out))
    assert compared.returncode == 0 and "100.0% -> 0.0% (-100.0pp" in compared.stdout, compared.stdout

    # Clear errors: no run there; a run without its kept files; a task that is gone.
    missing = cli(pytester.path, "rescore", "nowhere", "--tasks", ".")
    assert missing.returncode == 2 and "is not a run directory" in missing.stderr and "Traceback" not in missing.stderr
    shutil.copytree(pytester.path / "oracle", pytester.path / "stateless", ignore=shutil.ignore_patterns("states", "rescore-*"))
    stateless = cli(pytester.path, "rescore", "stateless", "--tasks", ".")
    assert stateless.returncode == 2 and "kept no final state for any of its 2 rollouts" in stateless.stderr
    tasks.unlink()
    gone = cli(pytester.path, "rescore", "oracle", "--tasks", ".")
    assert gone.returncode == 2 and "recorded task(s) ['test_note'] that no longer exist under ." in gone.stderr


def cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "agentcore_rl_harness.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


BAD_SCRIPT = notes_project.TASKS.replace('{"content": "Done."},', '{"content": 7},')


def test_a_bad_script_fails_the_task_saying_which_turn(pytester, tiny_model_dir):
    notes_project.write(pytester.path, tasks=BAD_SCRIPT)
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=oracle",
        "--agentcore-rl-out", "bad", timeout=600)
    assert result.ret == 0
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*the task's oracle failed*oracle _script[[]1[]].content must be a string*"])
    assert all(r["status"] == "task_error" for r in _records(pytester.path / "bad" / "rollouts.jsonl"))
