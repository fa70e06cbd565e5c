"""`RunOptions`: what the command line asks of one run, frozen before the run is made.

`run_options.py` converts pytest's `--agentcore-rl*` options into it once, when pytest configures
(each mistake a usage error there); `Run` is made from it and nothing changes it afterwards.
Free of pytest, so a run made by hand (a test, a script) passes one too.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Options a resume takes from the run directory instead (each takes one value).
FROM_THE_RUN_DIR = ("--agentcore-rl", "--agentcore-rl-out", "--agentcore-rl-config",
                    "--agentcore-rl-resume", "--agentcore-rl-set")


@dataclass(frozen=True)
class RunOptions:
    """What the command line asks of a run."""

    mode: str
    overrides: tuple[str, ...]  # the ini's agentcore_rl_set lines, then each --agentcore-rl-set
    rootdir: Path
    config_path: Path | None = None  # --agentcore-rl-config
    out: Path | None = None  # --agentcore-rl-out
    resume: Path | None = None  # --agentcore-rl-resume
    compare: Path | None = None  # --agentcore-rl-compare, resolved to a report
    save_baseline: str | None = None  # --agentcore-rl-save-baseline
    args: tuple[str, ...] = ()  # the session's own command-line arguments (a resume repeats them)

    def resume_command(self, run_dir: Path) -> str:
        """`pytest ARGS --agentcore-rl-resume RUN_DIR` with this session's own ARGS, less those
        the run directory holds (its mode, config, directory and overrides)."""
        return shlex.join(["pytest", *kept_arguments(self.args), "--agentcore-rl-resume",
                           str(Path(run_dir).resolve())])


def kept_arguments(args: Sequence[str]) -> list[str]:
    """`args` without the options a resume reads from the run directory (and their values)."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name, has_value, _ = arg.partition("=")
        if name in FROM_THE_RUN_DIR:
            skip_value = not has_value
            continue
        kept.append(arg)
    return kept
