"""The live progress display of a run: counters fed by the session, drawn on pytest's terminal.

`Progress` holds thread-safe counters (rollouts finish on the harness's loop thread) and decides
what to show; `render_status` turns a `Snapshot` into one line (pure). Two styles:

    tty    one status line redrawn in place (at most `MAX_REDRAWS_PER_S` a second), cleared
           before pytest or the harness writes anything else
    lines  quiet, for logs and CI: a line each time another `every_pct` of the phase is done or
           `every_s` passed, and one at each phase start

Only pytest's main thread draws: the session calls `tick` while it waits for rollouts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

MAX_REDRAWS_PER_S = 4.0
POLL_S = 1.0 / MAX_REDRAWS_PER_S  # how long the session waits on rollouts between ticks
ERASE_LINE = "\r\x1b[2K"
CURSOR_UP = "\x1b[1A"
CURSOR_DOWN = "\x1b[1B"


@dataclass(frozen=True)
class Snapshot:
    """What the display shows at one moment (one phase of the run)."""

    phase: str  # eval, collect, pre, train, post
    done: int  # rollouts finished in this phase (kept from a resume included)
    total: int
    scored: int  # rollouts scored so far (success known)
    successes: int
    live_sessions: int
    completion_tokens: int  # tokens sampled by the rollouts finished in this phase
    elapsed_s: float  # since the phase started
    step: int | None = None  # the training step (from 1), in phase "train"
    steps: int | None = None
    resumed: int = 0  # rollouts of `done` that a resumed run kept (not timed in this process)
    job: str | None = None  # run mode: the job's phases, this one in capitals ("pre>TRAIN>post ")
    job_eta: str | None = None  # run mode: "job ETA 9m12s", the whole job's time left


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def eta_s(snapshot: Snapshot) -> float | None:
    """Seconds left at this phase's rate so far (None until a rollout finished in this process)."""
    finished_here = snapshot.done - snapshot.resumed
    if finished_here <= 0 or snapshot.elapsed_s <= 0:
        return None
    return (snapshot.total - snapshot.done) * snapshot.elapsed_s / finished_here


STATUS_WIDTH = 80  # the status line fits a standard terminal; wider ones get more of it
# What a status line drops first when it does not fit, least useful first; the phase, done/total
# and the ETA always stay.
DROP_ORDER = ("tok/s", "live", "elapsed", "job", "success", "percent")


def render_status(snapshot: Snapshot, *, width: int | None = None) -> str:
    """One line: phase and step, rollouts done/total, success so far, live, tokens/s, ETA, and
    the whole job's ETA (run mode). With `width`, parts go in `DROP_ORDER` until it fits."""
    phase = snapshot.phase
    if snapshot.step is not None and snapshot.steps:
        phase = f"{phase} step {snapshot.step}/{snapshot.steps}"
    percent = 100 * snapshot.done / snapshot.total if snapshot.total else 100.0
    rate = snapshot.completion_tokens / snapshot.elapsed_s if snapshot.elapsed_s > 0 else 0.0
    if snapshot.scored:
        success = (f"success {snapshot.successes}/{snapshot.scored} "
                   f"({100 * snapshot.successes / snapshot.scored:.0f}%)")
    else:
        success = "success n/a"
    left = eta_s(snapshot)
    if snapshot.done >= snapshot.total:
        eta = "done"
    else:
        eta = "ETA " + ("--" if left is None else format_duration(left))
    # (key, text) in display order; "counts" and "eta" are never dropped
    parts = [("counts", f"{snapshot.done}/{snapshot.total} rollouts"), ("percent", f" ({percent:.0f}%)"),
             ("success", success), ("live", f"{snapshot.live_sessions} live"), ("tok/s", f"{rate:.1f} tok/s"),
             ("elapsed", f"{format_duration(snapshot.elapsed_s)} elapsed"), ("eta", eta)]
    if snapshot.job_eta is not None:
        parts.append(("job", snapshot.job_eta))
    prefix = f"agentcore-rl {snapshot.job or ''}{phase}: "

    def line(kept: list[tuple[str, str]]) -> str:
        text = ""
        for key, part in kept:
            text += part if key == "percent" else ("" if not text else " | ") + part
        return prefix + text

    for drop in (None, *DROP_ORDER):
        parts = [(key, part) for key, part in parts if key != drop]
        if width is None or len(line(parts)) <= width:
            break
    return line(parts)


def choose_style(requested: str, *, isatty: bool, environ: Mapping[str, str]) -> str:
    """`tty` only on an interactive terminal outside CI (`CI` set or `TERM=dumb` means lines)."""
    if requested != "auto":
        return requested
    ci = bool(environ.get("CI", "").strip()) and environ.get("CI", "").lower() not in ("0", "false")
    if not isatty or ci or environ.get("TERM") == "dumb":
        return "lines"
    return "tty"


class Terminal(Protocol):
    """Where the display draws: pytest's terminal reporter through `PytestTerminal`."""

    isatty: bool
    width: int  # columns the status line may use

    def write_line(self, text: str) -> None: ...

    def draw_status(self, text: str) -> None: ...

    def clear_status(self, *, pytest_next: bool = False, nodeid: str | None = None) -> None: ...


class Progress:
    """Counters of the current phase plus the policy for when and how to show them."""

    def __init__(
        self,
        terminal: Terminal | None,
        *,
        style: str = "lines",
        every_pct: float = 10.0,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._terminal = terminal
        self.style = style if terminal is not None else "off"
        self._every_pct = every_pct
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = ""
        self._total = 0
        self._done = 0
        self._resumed = 0
        self._scored = 0
        self._successes = 0
        self._tokens = 0
        self._step: int | None = None
        self._steps: int | None = None
        self._started = clock()
        self._last_draw = float("-inf")
        self._last_line_at = self._started
        self._last_line_pct = 0.0
        self._shown = False  # tty: the status line is on screen
        self._job: tuple[tuple[str, int], ...] = ()  # run mode: (phase, rollouts) of the whole job
        self._job_started = self._started
        self._job_done = 0  # rollouts of the job's earlier phases
        self._job_timed = 0  # ... of those, finished in this process (timed)

    # -- counters (any thread) ---------------------------------------------------------------

    def begin_phase(
        self, phase: str, total: int, *, already_done: int = 0, step: int | None = None,
        steps: int | None = None,
    ) -> None:
        with self._lock:
            if self._job and self._phase:
                self._job_done += self._done
                self._job_timed += self._done - self._resumed
            self._phase, self._total = phase, total
            self._done = self._resumed = already_done
            self._scored = self._successes = self._tokens = 0
            self._step, self._steps = step, steps
            self._started = self._last_line_at = self._clock()
            percent = 100.0 * already_done / total if total else 0.0
            self._last_line_pct = percent - percent % self._every_pct

    def set_job(self, phases: tuple[tuple[str, int], ...]) -> None:
        """`run` mode: the whole job's phases in order with their rollouts (pre, train, post), so
        the status line names them and gives the job's ETA besides the phase's."""
        with self._lock:
            self._job = tuple(phases)
            self._job_started = self._clock()
            self._job_done = self._job_timed = 0

    def _job_view(self, now: float) -> tuple[str | None, str | None]:
        if not self._job:
            return None, None
        names = [name.upper() if name == self._phase else name for name, _ in self._job]
        timed = self._job_timed + self._done - self._resumed
        left = sum(count for _, count in self._job) - self._job_done - self._done
        elapsed = now - self._job_started
        eta = "--" if timed <= 0 or elapsed <= 0 else format_duration(max(0, left) * elapsed / timed)
        return ">".join(names) + " ", f"job ETA {eta}"

    def rollout_finished(self, completion_tokens: int) -> None:
        with self._lock:
            self._done += 1
            self._tokens += completion_tokens

    def rollout_scored(self, success: bool | None) -> None:
        if success is None:  # infra_error: not in the success rate (DENOMINATOR_POLICY)
            return
        with self._lock:
            self._scored += 1
            self._successes += int(success)

    def snapshot(self, live_sessions: int = 0) -> Snapshot:
        with self._lock:
            now = self._clock()
            job, job_eta = self._job_view(now)
            return Snapshot(
                phase=self._phase, done=self._done, total=self._total, scored=self._scored,
                successes=self._successes, live_sessions=live_sessions,
                completion_tokens=self._tokens, elapsed_s=now - self._started,
                step=self._step, steps=self._steps, resumed=self._resumed, job=job, job_eta=job_eta,
            )

    # -- output (pytest's main thread only) ----------------------------------------------------

    def message(self, text: str) -> None:
        """A whole line from the harness (model loaded, a training step): never torn by the status."""
        if self._terminal is None:
            return
        self.clear()
        self._terminal.write_line(text)

    def tick(self, live_sessions: int = 0, *, waiting: bool = False, force: bool = False) -> None:
        """Show the counters if it is time: a redraw (tty) or a line (lines).

        `waiting`: pytest's thread is blocked on rollouts (the only time the tty status is drawn,
        so items whose rollouts already finished never split pytest's line). `force`: a line now
        (lines style; the end of a phase, with its success rate).
        """
        if self.style == "off" or not self._phase:
            return
        now = self._clock()
        snapshot = self.snapshot(live_sessions)
        if self.style == "tty":
            if waiting and now - self._last_draw >= POLL_S:
                self._terminal.draw_status(render_status(snapshot, width=self._terminal.width))
                self._shown = True
                self._last_draw = now
            return
        percent = 100.0 * snapshot.done / snapshot.total if snapshot.total else 100.0
        due = (
            force
            or self._last_line_pct + self._every_pct <= percent < 100.0
            or (waiting and now - self._last_line_at >= self._every_s)
        )
        if due:
            self._terminal.write_line(render_status(snapshot))
            self._last_line_at = now
            self._last_line_pct = percent - percent % self._every_pct

    def clear(self, *, pytest_next: bool = False, nodeid: str | None = None) -> None:
        """Take the status line off the screen before anything else is written (tty).

        `pytest_next`: pytest writes next (a test's result, its summary), else the harness does.
        """
        if self._shown and self._terminal is not None:
            self._terminal.clear_status(pytest_next=pytest_next, nodeid=nodeid)
            self._shown = False


class PytestTerminal:
    """Draws through pytest's terminal reporter, leaving its current line exactly as it was.

    The status lives on the row BELOW pytest's current (partial `file.py ..F`) line: each draw goes
    down a row, erases it, writes the status, and comes back up to the column where pytest's line
    ends. Clearing erases that row the same way. These bytes go straight to the terminal (not
    through pytest's writer), so pytest's own line bookkeeping is untouched and its next letter,
    `[ 42%]` or newline lands where it would have without the display. The first draw writes one
    newline so the row below exists (the screen scrolls once if pytest is on the last row).
    """

    def __init__(self, reporter: Any) -> None:
        self._reporter = reporter
        self.isatty = bool(getattr(reporter, "isatty", False))
        self._status_row = False

    @property
    def width(self) -> int:
        """The terminal's columns less one (writing the last column wraps on some terminals)."""
        return max(20, self._reporter._tw.fullwidth - 1)

    def write_line(self, text: str) -> None:
        """A whole line on a row of its own (pytest's partial `file.py ..` row is ended first)."""
        with self._capture_suspended():
            self._reporter.write_line(text)

    def _capture_suspended(self) -> contextlib.AbstractContextManager[None]:
        # Progress is written while a test waits for its rollout, i.e. while pytest captures the
        # test's output: suspend capturing around the write, as pytest's live logging does, or the
        # text would land in the test's "Captured stdout setup" instead of on the terminal.
        capture = self._reporter.config.pluginmanager.getplugin("capturemanager")
        return capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()

    def _raw(self, text: str) -> None:
        with self._capture_suspended():
            writer = self._reporter._tw
            writer.flush()
            stream = writer._file
            stream.write(text)
            stream.flush()

    def _back(self) -> str:
        """From the status row back up to the end of pytest's current line."""
        column = self._reporter._tw.width_of_current_line
        return CURSOR_UP + "\r" + (f"\x1b[{column}C" if column else "")

    def draw_status(self, text: str) -> None:
        width = self.width
        down = "\n" if not self._status_row else CURSOR_DOWN + "\r"
        self._raw(down + ERASE_LINE + text[:width] + self._back())
        self._status_row = True

    def clear_status(self, *, pytest_next: bool = False, nodeid: str | None = None) -> None:
        """Erase the status row (pytest's line and its bookkeeping are as they were)."""
        if not self._status_row:
            return
        self._status_row = False
        self._raw(CURSOR_DOWN + "\r" + ERASE_LINE + self._back())
