"""Fixtures for the viewer's tests: a run directory and a real `agentcore-rl view` process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from viewer_runs import RUN_NAME, write_run

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def run_dir(tmp_path, tiny_tokenizer):
    folder = tmp_path / "outputs" / RUN_NAME
    write_run(folder, tiny_tokenizer).close()
    return folder


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory, tiny_tokenizer):
    """A finished run that the module's tests only read (one viewer process serves them all)."""
    folder = tmp_path_factory.mktemp("shared") / "outputs" / RUN_NAME
    write_run(folder, tiny_tokenizer).close()
    return folder


@pytest.fixture(scope="module")
def shared_viewer(shared_run):
    (shared_run.parent.parent / "secret.txt").write_text("secret")
    (shared_run / "link").symlink_to(shared_run.parent.parent / "secret.txt")
    viewer = Viewer(str(shared_run.parent))  # the outputs/ folder: runs are found under it
    yield viewer
    viewer.stop()


class Viewer:
    """`agentcore-rl view ...` in its own process; `url` is what it printed."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentcore_rl_harness.cli", "view", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        line = self.process.stdout.readline()
        match = re.search(r"(http://\S+)", line)
        if match is None:
            self.process.kill()
            raise AssertionError(f"no URL from the viewer: {line!r} {self.process.stderr.read()}")
        self.url = match.group(1)
        self.base = self.url.split("?")[0]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def start_viewer():
    started = []

    def start(*args, **kwargs) -> Viewer:
        viewer = Viewer(*map(str, args), **kwargs)
        started.append(viewer)
        return viewer

    yield start
    for viewer in started:
        viewer.stop()
