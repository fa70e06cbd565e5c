"""A `progress.Terminal` for tests that read what a run printed (tests/run, tests/runtimes)."""

from __future__ import annotations


class Lines:
    """A `progress.Terminal` that keeps the lines written to it."""

    isatty = False
    width = 200

    def __init__(self):
        self.lines: list[str] = []

    def write_line(self, text):
        self.lines.append(text)

    def draw_status(self, text):
        pass

    def clear_status(self, *, pytest_next=False, nodeid=None):
        pass
