"""End to end: nothing a new user does wrong passes in silence (docs/troubleshooting.md).

Each test runs the plugin as a black box on a toy project with the tiny model and asserts the
message a user reads and the exit status."""

import json

import pytest
from toy_project import rows, write_project

pytestmark = pytest.mark.slow

CONSTANT_AND_BUGGY = '''
import agentcore_rl_harness as arl

@arl.reward
def never(rollout, row):
    if row["n"] == 3:
        return row["no_such_column"]  # a bug in the task's own reward
    return 0.0

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2, rewards=[never])
def test_toy(rollout, row):
    assert rollout.reward == 1.0
'''


def _run(pytester, mode, *extra, timeout=600):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", mode, "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=3", "--agentcore-rl-out", "run", *extra,
        timeout=timeout,
    )


def test_training_that_learns_nothing_says_so_and_a_reward_bug_is_a_task_error(pytester, tiny_model_dir):
    write_project(pytester.path, task=CONSTANT_AND_BUGGY, dataset=rows(4, train=2))
    result = _run(pytester, "run", "--agentcore-rl-set", "trainer.steps=2",
                  "--agentcore-rl-set", "trainer.batch_rows=2")
    output = result.stdout.str()
    assert result.ret == 0, output[-3000:]
    # every group had reward 0: step 1 warns with the reason and the levers, step 2 loudly
    assert "training step 1/2 trained nothing (0 tokens): 2 of 2 group(s) had the same reward" in output
    for lever in ("warmup.enabled=true", "sampling.temperature", "algo.group_size", "partial credit"):
        assert lever in output, lever
    assert "That is 2 steps in a row without an update" in output
    run = pytester.path / "run"
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    for step in steps:
        assert step["informative_groups"] == 0 and step["informative_fraction"] == 0.0
        assert step["trained_tokens"] == 0 and step["reward_spread"] == 0.0
        assert step["constant_groups"] == 2 and step["groups_total"] == 2
    report = json.loads((run / "report.json").read_text())
    assert report["training"] == {"steps": 2, "effective_steps": 0, "informative_group_fraction": 0.0,
                                  "trained_tokens": 0, "dropped_stale": None,
                                  "cut_stragglers": None}  # None: not async
    markdown = (run / "report.md").read_text().splitlines()
    assert markdown[2].startswith("> **WARNING** TRAINING CHANGED NOTHING: 0 of 2 steps")
    assert "TRAINING CHANGED NOTHING" in (run / "report.html").read_text()
    # per step (from 1): reward, success, loss, informative groups, tokens (then sync, spread, KL, ...)
    assert any(line.startswith("| 1 | 0.000 | 0.0% | n/a | 0.0% | 0 |") for line in markdown), markdown
    # the reward's bug: task_error, counted apart, the user's traceback printed once
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    buggy = [r for r in records if r["row_id"] == "r3"]
    assert buggy and all(r["status"] == "task_error" and r["success"] is None for r in buggy)
    error = buggy[0]["error"]
    assert error.startswith("KeyError: 'no_such_column'") and 'return row["no_such_column"]' in error
    assert "pluggy" not in error and "_pytest" not in error and "agentcore_rl_harness" not in error
    assert output.count("Traceback (most recent call last)") == 1, output[-4000:]
    assert "task_error: task test_toy's own code raised" in output
    assert "During handling of the above exception" not in output
    assert report["overall"]["failures"] == {"task_failed": 2, "task_error": 2}
    assert report["overall"]["success_rate"]["n"] == 2  # task errors are not the agent's failures
    assert "`task_error`: 2 of 4 rollouts" in "\n".join(markdown)
    junit = (run / "junit.xml").read_text()
    assert junit.count("<error") == 4  # r3's two samples, pre and post: errors, not failures


# The project's conftest makes the trainer's update from call SLOW_FROM on take 300 s (before it
# touches the weights), so a signal surely lands in it: a stop must not wait for it.
SLOW_UPDATE = """
import os
import time

from agentcore_rl_harness.trainers import local

_step, _calls = local.LocalTrainer.step_sync, []


def step_sync(self, groups):
    _calls.append(1)
    if len(_calls) >= int(os.environ.get("SLOW_FROM") or 10**9):
        time.sleep(300)
    return _step(self, groups)


local.LocalTrainer.step_sync = step_sync
"""


UPDATE_STARTS = r"^agentcore-rl train step {step}: (updating on|nothing to train)"  # the update's start line


def _start(path, args, *, slow_from):
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "SLOW_FROM": str(slow_from)}
    return subprocess.Popen(  # SIGINT as at a terminal, even where this test runs in the background
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _signal_on(process, triggers, timeout=600):
    """Read the process's output; send SIGINT after each line matching the next trigger (a
    regular expression). Returns (output, seconds from the first SIGINT to the exit)."""
    import re
    import signal
    import threading
    import time

    lines, sent = [], []

    def read():
        for line in process.stdout:
            lines.append(line)
            if len(sent) < len(triggers) and re.search(triggers[len(sent)], line):
                sent.append(time.monotonic())
                process.send_signal(signal.SIGINT)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    process.wait(timeout=timeout)
    reader.join(timeout=10)
    assert sent, "".join(lines)[-3000:]
    return "".join(lines), time.monotonic() - sent[0]


def test_ctrl_c_during_an_update_stops_at_once_with_a_report_of_what_is_on_disk_and_resumes(pytester, tiny_model_dir):
    import shlex
    import subprocess
    import sys

    from toy_project import even_length_task, kill_group

    write_project(pytester.path, task=even_length_task(samples=2), dataset=rows(4, train=2))
    pytester.makeconftest(SLOW_UPDATE)
    args = ["--agentcore-rl", "run", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "sampling.max_tokens=4",
            "--agentcore-rl-set", "trainer.steps=2", "--agentcore-rl-set", "trainer.batch_rows=2",
            "--agentcore-rl-set", "trainer.checkpoint_every=1", "--agentcore-rl-out", "run"]
    run = pytester.path / "run"
    process = _start(pytester.path, args, slow_from=2)  # step 2's update hangs
    try:  # Ctrl-C as step 2's update starts (step 1 is done and saved)
        output, stop_s = _signal_on(process, [UPDATE_STARTS.format(step="2/2")])
    finally:
        kill_group(process)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert stop_s < 60, f"the stop took {stop_s:.0f} s: it waited for the update"  # the update takes 300 s
    # no traceback, no source location: pytest's last word is the one-line reason
    assert "Traceback" not in output and ".py:" not in output.split("agentcore-rl: stopping")[1], output[-3000:]
    assert "RunStopped: stopped by SIGINT; the run's report and the resume command are above" in output
    assert "agentcore-rl: stopping: the run ends and writes its report; Ctrl-C again exits at once" in output
    assert ("agentcore-rl train step 2/2: stopped during its update; the step is discarded (no steps.jsonl line, "
            "no checkpoint). Its 4 rollouts stay in rollouts.jsonl; a resume sets them aside and trains again "
            "after checkpoint step-00001 (step 2 on).") in output
    on_disk = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(on_disk) == 12  # 4 pre-eval + 4 of step 1 + 4 of step 2
    report = json.loads((run / "report.json").read_text())
    stopped = report["interrupted"]
    assert stopped["rollouts_on_disk"] == 12 and stopped["by_phase"] == {"pre": 4, "train": 8}
    assert stopped["train_steps"] == 1 and stopped["checkpoint"] == "checkpoints/step-00001"
    resume = f"pytest -p no:cacheprovider --agentcore-rl-resume {run}"
    assert stopped["resume"] == resume and f"Resume with: {resume}" in output
    assert "INTERRUPTED: the run was stopped before it finished; 12 rollouts are on disk (pre 4, train 8)" in output
    assert "agentcore-rl run: no post rollout finished before the stop" in output  # not "0 rollouts"
    assert "(0 rollouts" not in output
    assert (run / "report.md").read_text().splitlines()[2].startswith("> **WARNING** INTERRUPTED:")
    # one step numbering: the terminal's step 1/2 is steps.jsonl step 1, its rollouts' step 1, step-00001
    assert "agentcore-rl train step 1/2: updating on " in output or "agentcore-rl train step 1/2: nothing to train" in output
    assert "agentcore-rl train step 1/2 done: reward " in output and ", saved step-00001" in output
    [first] = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert first["step"] == 1 and first["checkpoint"] == "step-00001"
    assert sorted({r["step"] for r in on_disk if r["phase"] == "train"}) == [1, 2]

    # the printed command resumes it (no --agentcore-rl MODE: the run knows its mode); step 2 is redone
    resumed = subprocess.run([sys.executable, "-m", *shlex.split(resume)], cwd=pytester.path, capture_output=True,
                             text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "training continues at step 2 after checkpoint step-00001" in resumed.stdout
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and steps[1]["checkpoint"] == "step-00002"
    final = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert sum(1 for r in final if r["phase"] == "train" and r["step"] == 2) == 4  # the stopped step's set aside
    report = json.loads((run / "report.json").read_text())
    assert report["interrupted"] is None and report["delta"]["overall"]["pairs"] == 4
    assert [s["step"] for s in report["train"]] == [1, 2]


def test_a_second_ctrl_c_exits_at_once_without_the_report(pytester, tiny_model_dir):
    from toy_project import even_length_task, kill_group

    write_project(pytester.path, task=even_length_task(samples=2), dataset=rows(2, train=2))
    pytester.makeconftest(SLOW_UPDATE)
    args = ["--agentcore-rl", "train", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set",
            "sampling.max_tokens=4", "--agentcore-rl-set", "trainer.steps=1", "--agentcore-rl-set",
            "trainer.batch_rows=1", "--agentcore-rl-out", "run"]
    run = pytester.path / "run"
    process = _start(pytester.path, args, slow_from=1)
    try:  # Ctrl-C in the update, and again as soon as the run says it is stopping
        output, stop_s = _signal_on(process, [UPDATE_STARTS.format(step="1/1"), "agentcore-rl: stopping"])
    finally:
        kill_group(process)
    assert process.returncode == 128 + 2, output[-3000:]
    assert stop_s < 30, stop_s
    assert ("agentcore-rl: second interrupt: exiting now, without the report. Finished rollouts are in "
            f"rollouts.jsonl; continue with: pytest -p no:cacheprovider --agentcore-rl-resume {run}") in output
    assert "Traceback" not in output
    assert len((run / "rollouts.jsonl").read_text().splitlines()) == 2  # what finished is on disk
    assert not (run / "report.json").exists()
