"""Ctrl-C and SIGTERM under `--agentcore-rl`: the first stops the run cleanly, a second exits now.

The first SIGINT or SIGTERM raises KeyboardInterrupt in pytest's thread, as Ctrl-C does: pytest
ends the session, the run stops its agents and writes its reports with the INTERRUPTED banner and
the resume command (`run/core.py` `finish`). Stopping takes a moment (agent sessions, the
sampler, an update in flight stops at its next micro-batch), and a user who presses Ctrl-C again
wants out: the second signal exits at once, without a traceback. rollouts.jsonl is flushed as each
rollout ends, so what finished is on disk either way.

Only installed on the main thread, and only over Python's own handlers (a project's handler wins).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

EXIT_AT_ONCE = ("\nagentcore-rl: second interrupt: exiting now, without the report. Finished rollouts "
                "are in rollouts.jsonl; continue with: {resume}\n")


STOPPING = "\nagentcore-rl: stopping: the run ends and writes its report; Ctrl-C again exits at once\n"


class RunStopped(KeyboardInterrupt):
    """The first Ctrl-C or SIGTERM: a KeyboardInterrupt (pytest ends the session as interrupted,
    exit 2), whose one line pytest prints without a source location or traceback."""


class Interrupts:
    """The installed handlers; `stopping` once the first signal came. They write to the stderr
    of the moment they were installed (pytest's capture may hold fd 2 while a test runs)."""

    def __init__(self, resume: str) -> None:
        self.stopping = False
        self.resume = resume
        self._stderr = os.dup(2)
        self._replaced: dict[int, Any] = {}  # signal -> the handler before ours

    def __call__(self, signum: int, frame: Any) -> None:
        if self.stopping:
            self._say(EXIT_AT_ONCE.format(resume=self.resume))
            os._exit(128 + signum)
        self.stopping = True
        self._say(STOPPING)
        raise RunStopped(f"stopped by {signal.Signals(signum).name}; the run's report and the resume "
                         "command are above")

    def restore(self) -> None:
        """Put the handlers back as they were (the session is over; an in-process pytest run
        leaves its host's handlers as it found them)."""
        for signum, previous in self._replaced.items():
            if signal.getsignal(signum) is self:
                signal.signal(signum, previous)
        self._replaced.clear()
        os.close(self._stderr)

    def _say(self, text: str) -> None:
        try:
            os.write(self._stderr, text.encode())
        except OSError:  # the terminal is gone: the exit status still tells
            pass


def install(resume: str = "pytest --agentcore-rl-resume RUN_DIR") -> Interrupts | None:
    """Handle SIGINT (over Python's default) and SIGTERM (over the default action); `resume` is
    the command that continues the run (said when a second signal exits at once)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handlers = Interrupts(resume)
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(signum) is default:
            handlers._replaced[signum] = signal.signal(signum, handlers)
    return handlers
