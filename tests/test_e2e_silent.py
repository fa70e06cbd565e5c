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
                                  "trained_tokens": 0}
    markdown = (run / "report.md").read_text().splitlines()
    assert markdown[2].startswith("> **WARNING** TRAINING CHANGED NOTHING: 0 of 2 steps")
    assert "TRAINING CHANGED NOTHING" in (run / "report.html").read_text()
    assert "| 0 | 0.000 | 0.0% | n/a | 0.0% | 0 |" in markdown  # per step: informative groups, tokens
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


def test_ctrl_c_leaves_a_report_that_counts_what_is_on_disk_and_the_resume_command_works(pytester, tiny_model_dir):
    import shlex
    import signal
    import subprocess
    import sys
    import time

    from toy_project import even_length_task, kill_group

    write_project(pytester.path, task=even_length_task(samples=2), dataset=rows(4, train=2))
    args = ["-p", "no:cacheprovider", "--agentcore-rl", "run", "--agentcore-rl-set", "model=tiny",
            "--agentcore-rl-set", "sampling.max_tokens=4", "--agentcore-rl-set", "trainer.steps=2",
            "--agentcore-rl-set", "trainer.batch_rows=2", "--agentcore-rl-set", "trainer.checkpoint_every=1",
            "--agentcore-rl-out", "run"]
    run = pytester.path / "run"
    process = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=pytester.path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (run / "checkpoints" / "step-00001").is_dir():
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)  # Ctrl-C during step 2's rollouts
        output, _ = process.communicate(timeout=300)
    finally:
        kill_group(process)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    on_disk = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(on_disk) >= 8  # 4 pre-eval + 4 of step 1 at least
    report = json.loads((run / "report.json").read_text())
    stopped = report["interrupted"]
    assert stopped["rollouts_on_disk"] == len(on_disk) and stopped["by_phase"]["pre"] == 4
    assert stopped["train_steps"] >= 1 and stopped["checkpoint"].startswith("checkpoints/step-0000")
    resume = f"pytest -p no:cacheprovider --agentcore-rl-resume {run}"
    assert stopped["resume"] == resume
    assert f"Resume with: {resume}" in output  # printed at the end of the session
    assert f"INTERRUPTED: the run was stopped before it finished; {len(on_disk)} rollouts are on disk" in output
    assert (run / "report.md").read_text().splitlines()[2].startswith("> **WARNING** INTERRUPTED:")
    # one step number everywhere: the terminal's step 1/2 is steps.jsonl step 0 and step-00001
    assert "agentcore-rl train step 1/2 (steps.jsonl step 0, checkpoint step-00001)" in output
    first = json.loads((run / "train" / "steps.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and first["checkpoint"] == "step-00001"

    # the printed command resumes it as it was (no --agentcore-rl MODE: the run knows its mode)
    command = shlex.split(resume)
    resumed = subprocess.run([sys.executable, "-m", *command], cwd=pytester.path, capture_output=True,
                             text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "training continues at step 2 (steps.jsonl step 1) after checkpoint step-00001" in resumed.stdout
    final = json.loads((run / "report.json").read_text())
    assert final["interrupted"] is None and final["delta"]["overall"]["pairs"] == 4
