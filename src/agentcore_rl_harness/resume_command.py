"""Resuming a stopped run: the exact command that continues it, and the mode it was run in.

A stopped run (Ctrl-C, SIGTERM, a killed job) prints and reports this command; it repeats the
user's own arguments (test paths, `-k`, plugins) without those the run directory already holds
(its mode, config, directory and overrides live in `run.json` / `config.yaml`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from .store import RUN_INFO

# Options a resume takes from the run directory instead (each takes one value).
_FROM_THE_RUN = ("--agentcore-rl", "--agentcore-rl-out", "--agentcore-rl-config",
                 "--agentcore-rl-resume", "--agentcore-rl-set")


def resume_command(args: Sequence[str], run_dir: Path) -> str:
    """`pytest ARGS --agentcore-rl-resume RUN_DIR` with this session's own ARGS."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name, has_value, _ = arg.partition("=")
        if name in _FROM_THE_RUN:
            skip_value = not has_value
            continue
        kept.append(arg)
    return shlex.join(["pytest", *kept, "--agentcore-rl-resume", str(Path(run_dir).resolve())])


def resumed_mode(run_dir: Path) -> str:
    """The mode a run directory was made in (its run.json), for `--agentcore-rl-resume` alone."""
    info = Path(run_dir) / RUN_INFO
    try:
        return str(json.loads(info.read_text(encoding="utf-8"))["mode"])
    except (OSError, ValueError, KeyError) as exc:
        raise pytest.UsageError(
            f"--agentcore-rl-resume {run_dir}: cannot read the run's mode from {info} ({exc}); "
            "is it a run directory? (it holds run.json, config.yaml and rollouts.jsonl)") from None
