"""The `--agentcore-rl*` command-line options, converted and checked once, when pytest configures
(every mistake a usage error), into the frozen `run.options.RunOptions` the run is made from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .errors import HarnessError
from .run.finish import resolve_baseline
from .run.options import RunOptions
from .run.plan import MODES
from .store import RUN_INFO

# The options that only mean something with --agentcore-rl MODE.
RUN_FLAGS = ("agentcore_rl_set", "agentcore_rl_config", "agentcore_rl_out", "agentcore_rl_resume",
             "agentcore_rl_compare", "agentcore_rl_save_baseline")


def run_options(config: pytest.Config) -> RunOptions | None:
    """The run's options; None without --agentcore-rl (then no run flag may be given)."""
    mode = config.getoption("agentcore_rl")
    if mode is None and config.getoption("agentcore_rl_resume"):
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
    return RunOptions(mode=mode, overrides=overrides, rootdir=rootdir, config_path=Path(path) if path else None,
                      out=Path(out) if out else None, resume=Path(resume) if resume else None,
                      compare=compare, save_baseline=name, args=tuple(config.invocation_params.args))


def resumed_mode(run_dir: Path) -> str:
    """The mode a run directory was made in (its run.json), for `--agentcore-rl-resume` alone."""
    info = Path(run_dir) / RUN_INFO
    try:
        return str(json.loads(info.read_text(encoding="utf-8"))["mode"])
    except (OSError, ValueError, KeyError) as exc:
        raise pytest.UsageError(
            f"--agentcore-rl-resume {run_dir}: cannot read the run's mode from {info} ({exc}); "
            "is it a run directory? (it holds run.json, config.yaml and rollouts.jsonl)") from None
