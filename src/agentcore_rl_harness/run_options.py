"""`RunOptions`: the `--agentcore-rl*` command-line options, converted and checked once, when
pytest configures (every mistake a usage error), and frozen from then on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .errors import HarnessError
from .run.finish import resolve_baseline
from .run.plan import MODES

# The options that only mean something with --agentcore-rl MODE.
RUN_FLAGS = ("agentcore_rl_set", "agentcore_rl_config", "agentcore_rl_out", "agentcore_rl_resume",
             "agentcore_rl_compare", "agentcore_rl_save_baseline")


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

    @classmethod
    def from_pytest(cls, config: pytest.Config) -> RunOptions | None:
        """The run's options; None without --agentcore-rl (then no run flag may be given)."""
        mode = config.getoption("agentcore_rl")
        if mode is None and config.getoption("agentcore_rl_resume"):
            from .resume_command import resumed_mode

            mode = resumed_mode(Path(config.getoption("agentcore_rl_resume")))  # the run knows its mode
        if mode is None:
            for flag in RUN_FLAGS:
                if config.getoption(flag):
                    name = "--" + flag.replace("_", "-")
                    raise pytest.UsageError(f"{name} needs --agentcore-rl MODE ({', '.join(MODES)})")
            return None
        if mode not in MODES:
            raise pytest.UsageError(f"--agentcore-rl {mode!r}: unknown mode; valid choices: {', '.join(MODES)}")
        overrides = (*config.getini("agentcore_rl_set"), *config.getoption("agentcore_rl_set"))
        for override in overrides:
            if "=" not in override:
                raise pytest.UsageError(f"--agentcore-rl-set {override!r}: expected KEY=VALUE (e.g. model=tiny)")
        path, out, resume = (config.getoption(f"agentcore_rl_{name}") for name in ("config", "out", "resume"))
        if resume and (path or out):
            raise pytest.UsageError(
                "--agentcore-rl-resume DIR reuses DIR's config.yaml and directory; drop "
                "--agentcore-rl-config / --agentcore-rl-out"
            )
        rootdir = Path(config.rootpath)
        baseline, name = config.getoption("agentcore_rl_compare"), config.getoption("agentcore_rl_save_baseline")
        try:
            compare = resolve_baseline(rootdir, baseline) if baseline else None
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from exc
        if name is not None and (not name or "/" in name or name.startswith(".")):
            raise pytest.UsageError(f"--agentcore-rl-save-baseline {name!r}: use a plain name like 'main'")
        return cls(mode=mode, overrides=overrides, rootdir=rootdir, config_path=Path(path) if path else None,
                   out=Path(out) if out else None, resume=Path(resume) if resume else None,
                   compare=compare, save_baseline=name)
