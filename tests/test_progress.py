"""The live progress display: the renderer, the tty/lines choice, and real pytest runs."""

import json
import os
import re
import select
import subprocess
import sys
import time

import pytest
from toy_project import AGENT

from agentcore_rl_harness.progress import (
    Progress, Snapshot, choose_style, eta_s, format_duration, render_status,
)


def snapshot(**changes):
    base = dict(phase="eval", done=12, total=48, scored=10, successes=7, live_sessions=8,
                completion_tokens=1200, elapsed_s=60.0)
    base.update(changes)
    return Snapshot(**base)


def test_render_status_shows_counts_success_live_throughput_and_eta():
    line = render_status(snapshot())
    assert line == (
        "agentcore-rl eval: 12/48 rollouts (25%) | success 7/10 (70%) | 8 live | 20.0 tok/s | "
        "1m00s elapsed | ETA 3m00s"  # 36 left at 12 per minute
    )


def test_render_status_training_step_nothing_yet_and_done():
    line = render_status(snapshot(phase="train", step=2, steps=6, done=0, scored=0, successes=0,
                                  completion_tokens=0, elapsed_s=2.0))
    assert line.startswith("agentcore-rl train step 2/6: 0/48 rollouts (0%) | success n/a")
    assert line.endswith("ETA --")
    assert render_status(snapshot(done=48)).endswith("| done")


def test_status_fits_80_columns_keeping_phase_counts_and_eta():
    wide = snapshot(phase="train", step=12, steps=20, done=123, total=256, scored=120, successes=17,
                    live_sessions=16, completion_tokens=123456, elapsed_s=4000.0,
                    job="pre>TRAIN>post ", job_eta="job ETA 3h00m")
    line = render_status(wide, width=80)
    assert len(line) <= 80, line
    assert line.startswith("agentcore-rl pre>TRAIN>post train step 12/20: 123/256 rollouts")
    assert "| ETA 1h12m" in line  # the phase ETA survives
    assert "tok/s" not in line and "live" not in line  # dropped first
    assert len(render_status(snapshot(), width=80)) <= 80
    assert render_status(snapshot(), width=80).endswith("ETA 3m00s")
    assert "30.9 tok/s | 1h06m elapsed | ETA 1h12m | job ETA 3h00m" in render_status(wide, width=300)


def test_tty_status_is_drawn_at_the_terminals_width():
    terminal, clock = FakeTerminal(), Clock()
    terminal.width = 60
    progress = Progress(terminal, style="tty", clock=clock)
    progress.begin_phase("eval", 48)
    clock.now += 10
    progress.rollout_finished(500)
    progress.tick(waiting=True)
    (kind, text), = terminal.events
    assert kind == "draw" and len(text) <= 60 and text.startswith("agentcore-rl eval: 1/48 rollouts")
    assert "ETA 7m50s" in text


def test_run_mode_shows_the_jobs_phases_and_its_eta():
    terminal, clock = FakeTerminal(), Clock()
    progress = Progress(terminal, style="lines", clock=clock)
    progress.set_job((("pre", 4), ("train", 8), ("post", 4)))
    progress.begin_phase("pre", 4)
    assert progress.snapshot().job == "PRE>train>post " and progress.snapshot().job_eta == "job ETA --"
    for _ in range(4):
        clock.now += 5
        progress.rollout_finished(10)
    progress.begin_phase("train", 4, step=1, steps=2)
    clock.now += 10
    progress.rollout_finished(10)
    snap = progress.snapshot()
    assert snap.job == "pre>TRAIN>post "
    # 5 rollouts in 30 s -> 6 s each; 16 - 4 - 1 = 11 left -> 66 s
    assert snap.job_eta == "job ETA 1m06s"
    line = render_status(snap, width=80)
    assert line.startswith("agentcore-rl pre>TRAIN>post train step 1/2: 1/4 rollouts") and len(line) <= 80
    assert "job ETA 1m06s" in render_status(snap)


def test_eta_ignores_rollouts_a_resume_kept():
    # 40 of 48 were kept from the stopped run; 4 finished here in 10 s -> 4 left take 10 s
    assert eta_s(snapshot(done=44, resumed=40, elapsed_s=10.0)) == pytest.approx(10.0)
    assert eta_s(snapshot(done=40, resumed=40, elapsed_s=10.0)) is None


def test_format_duration():
    assert [format_duration(s) for s in (0, 9.6, 75, 3725)] == ["0s", "10s", "1m15s", "1h02m"]


@pytest.mark.parametrize(
    "requested, isatty, environ, style",
    [
        ("auto", True, {"TERM": "xterm"}, "tty"),
        ("auto", False, {"TERM": "xterm"}, "lines"),
        ("auto", True, {"TERM": "xterm", "CI": "true"}, "lines"),
        ("auto", True, {"TERM": "xterm", "CI": "false"}, "tty"),
        ("auto", True, {"TERM": "dumb"}, "lines"),
        ("lines", True, {}, "lines"),
        ("off", True, {}, "off"),
    ],
)
def test_tty_only_on_an_interactive_terminal_outside_ci(requested, isatty, environ, style):
    assert choose_style(requested, isatty=isatty, environ=environ) == style


class FakeTerminal:
    isatty = False
    width = 200

    def __init__(self):
        self.events = []

    def write_line(self, text):
        self.events.append(("line", text))

    def draw_status(self, text):
        self.events.append(("draw", text))

    def clear_status(self, *, pytest_next=False, nodeid=None):
        self.events.append(("clear", pytest_next))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_lines_style_one_line_per_step_of_progress_or_interval_and_a_final_line():
    terminal, clock = FakeTerminal(), Clock()
    progress = Progress(terminal, style="lines", every_pct=25, every_s=30, clock=clock)
    progress.begin_phase("eval", 8)
    for _ in range(3):
        progress.rollout_finished(10)
        progress.tick(waiting=True)
    assert [text.split(" | ")[0] for _, text in terminal.events] == [
        "agentcore-rl eval: 2/8 rollouts (25%)"]
    clock.now += 31  # a slow phase still shows a line every every_s seconds
    progress.tick(waiting=True)
    assert terminal.events[-1][1].startswith("agentcore-rl eval: 3/8 rollouts (38%)")
    for _ in range(5):
        progress.rollout_finished(10)
        progress.rollout_scored(True)
        progress.tick()
    assert "8/8" not in terminal.events[-1][1]  # 100% waits for the scores: the forced line
    progress.tick(force=True)
    assert terminal.events[-1][1].startswith("agentcore-rl eval: 8/8 rollouts (100%) | success 5/5")
    assert all(kind == "line" for kind, _ in terminal.events)


def test_tty_style_redraws_at_most_four_times_a_second_and_clears_before_messages():
    terminal, clock = FakeTerminal(), Clock()
    progress = Progress(terminal, style="tty", clock=clock)
    progress.begin_phase("pre", 4)
    progress.tick(waiting=True)
    progress.tick(waiting=True)  # same instant: no redraw
    clock.now += 0.3
    progress.rollout_finished(5)
    progress.tick(waiting=True)
    progress.tick()  # not waiting (an item's rollout was already there): no draw
    assert [kind for kind, _ in terminal.events] == ["draw", "draw"]
    progress.message("agentcore-rl train step 1/2: reward 0.5")
    assert terminal.events[-2:] == [("clear", False), ("line", "agentcore-rl train step 1/2: reward 0.5")]
    progress.clear(pytest_next=True)  # nothing on screen: nothing to clear
    assert terminal.events[-1][0] == "line"


def test_without_a_terminal_nothing_is_written():
    progress = Progress(None, style="tty")
    progress.begin_phase("eval", 1)
    progress.tick(waiting=True, force=True)
    progress.message("hello")
    assert progress.style == "off"


# -- real runs ---------------------------------------------------------------------------------


TASK = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2)
def test_toy(rollout, row):
    assert row["n"] % 2 == 0
'''


def _toy(path, rows=4, sleep=0.0):
    lines = [json.dumps({"id": f"r{i}", "split": "test", "n": i, "question": f"Say {i}",
                         "sleep": sleep}) for i in range(rows)]
    (path / "data.jsonl").write_text("\n".join(lines) + "\n")
    (path / "agent.py").write_text(AGENT)
    (path / "test_toy.py").write_text(TASK)


ARGS = ["--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=6", "--agentcore-rl-out", "run"]


@pytest.mark.slow
def test_eval_on_a_tty_redraws_one_status_line_in_place(tmp_path, tiny_model_dir):
    import pty

    _toy(tmp_path, rows=3, sleep=1.5)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(TERM="xterm", COLUMNS="160", LINES="40")
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *ARGS,
         "--agentcore-rl-set", "runtime.concurrency=1"],
        cwd=tmp_path, stdin=follower, stdout=follower, stderr=follower, env=env,
    )
    os.close(follower)
    chunks, deadline = [], time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif process.poll() is not None:
            break
    process.wait(timeout=60)
    os.close(leader)
    output = b"".join(chunks).decode("utf-8", "replace")
    assert process.returncode == 0, output[-3000:]
    redraws = re.findall(r"\r\x1b\[2Kagentcore-rl eval: (\d)/6 rollouts", output)
    assert len(redraws) >= 3, output[-3000:]  # the same row, drawn again and again
    assert len(set(redraws)) > 1  # ... with new counts
    assert not re.search(r"\nagentcore-rl eval: \d/6", output)  # never as lines of their own
    # cleared before pytest's summary: the summary line starts its own row, untouched
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    assert re.search(r"\n=+ .*2 failed, 4 passed.* =+", plain)
    # drawn on the row below pytest's: the file's result row is never broken and re-prefixed
    assert plain.count("test_toy.py ") == 1, output[-3000:]
    # drawn with pytest's capturing suspended: never in a failed test's captured output
    assert "Captured stdout" not in plain, output[-3000:]


@pytest.mark.slow
def test_eval_without_a_tty_prints_progress_lines_never_captured_nor_glued_to_pytests_rows(
        pytester, tiny_model_dir):
    _toy(pytester.path, rows=4, sleep=0.5)
    data = pytester.path / "data.jsonl"  # the first item waits on a slow rollout, the rest finish
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[0]["sleep"] = 4.0
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = pytester.runpytest_subprocess(
        *ARGS, "-rA", "--agentcore-rl-set", "runtime.concurrency=8",
        "--agentcore-rl-set", "report.progress_every_pct=25", timeout=600,
    )
    output = result.stdout.str()
    assert result.ret == 0, output[-3000:]
    # without a tty: plain lines with the totals, one per 25% and the final one
    assert "\r" not in output and "\x1b[2K" not in output
    lines = [line for line in output.splitlines() if re.match(r"agentcore-rl eval: \d+/", line)]
    assert lines, output[-3000:]
    assert all(re.match(r"agentcore-rl eval: \d/8 rollouts \(\d+%\) \| success ", line)
               for line in lines), lines
    assert lines[-1].startswith("agentcore-rl eval: 8/8 rollouts (100%) | success 4/8 (50%)")
    assert "tok/s" in lines[-1] and lines[-1].endswith("| done")
    assert len(lines) <= 1 + 4 + 2  # quiet: one per 25%, plus the final line (and slack)
    # -rA prints every test's captured output: progress written during a test's setup (while its
    # fixture waits for the rollout) must have gone to the terminal, not into those sections
    sections = re.split(r"^-+ Captured (?:stdout|stderr|log) \w+ -+$", output, flags=re.M)[1:]
    for section in sections:
        body = re.split(r"^(?:_+ .* _+|=+ .* =+)$", section, maxsplit=1, flags=re.M)[0]
        assert "agentcore-rl" not in body, section[:2000]
    # each progress line on a row of its own: never after pytest's `test_toy.py ..` or `[ 50%]`
    assert re.search(r"^agentcore-rl eval: \d/8 rollouts", output, flags=re.M), output[-3000:]
    glued = [line for line in output.splitlines()
             if "agentcore-rl " in line and not line.startswith("agentcore-rl ")]
    assert not glued, output[-3000:]
