"""The `logger` config group: choices, several at once, errors that say how to fix them, and a
default that loads no tracker."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError, MissingDependencyError
from agentcore_rl_harness.trackers import registry

ROOT = Path(__file__).resolve().parents[2]


def test_the_choices_are_the_packaged_options():
    assert registry.choices() == ["mlflow", "none", "tensorboard", "wandb"]


def test_default_is_none_and_imports_no_tracker():
    code = ("import sys; from agentcore_rl_harness.config import compose_config; "
            "assert compose_config().typed.logger == {}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('wandb', 'mlflow', 'tensorboard') "
            "or m.startswith('agentcore_rl_harness.trackers.') and m.endswith('_tracker')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_main_job_installs_no_tracker():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    main = " ".join(extras["main"] + extras["local"] + extras["agent"])
    assert not any(name in main for name in ("wandb", "mlflow", "tensorboard"))
    assert extras["wandb"] and extras["mlflow"] and extras["tensorboard"]


@pytest.mark.parametrize("overrides, names", [
    (["logger=wandb"], ["wandb"]),
    (["logger=[tensorboard,wandb]"], ["tensorboard", "wandb"]),
    (["logger=[tensorboard,mlflow,wandb]", "logger.wandb.project=p", "logger.mlflow.experiment=e"],
     ["tensorboard", "mlflow", "wandb"]),
    (["logger=none"], []),
])
def test_one_or_several_trackers_compose(overrides, names):
    typed = compose_config(overrides).typed
    assert list(typed.logger) == names
    if "wandb" in names:
        assert typed.logger["wandb"].project == ("p" if "logger.wandb.project=p" in overrides else "agentcore-rl")
    if "mlflow" in names and len(overrides) > 1:
        assert typed.logger["mlflow"].experiment == "e"


@pytest.mark.parametrize("overrides, message", [
    (["logger=neptune"], "Could not find 'logger/neptune'"),
    (["logger=wandb", "+logger.wandb.api_key=abc"],
     "logger.wandb.api_key would write a credential into the run's config.yaml"),
    (["logger=wandb", "logger.wandb.mode=sometimes"], "logger.wandb.mode='sometimes' is not supported"),
    (["logger=wandb", "+logger.wandb.projekt=x"], "unknown config key(s) `projekt` under logger.wandb; did you mean `project`"),
    (["logger=mlflow", "logger.mlflow.tracking_uri=https://me:pw@mlflow.example"],
     "set MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"),
    (["+logger.neptune.project=x"], "logger=neptune is not available; valid choices: ['mlflow', 'none'"),
    (["logger=tensorboard", "logger.tensorboard.flush_secs=soon"], "logger.tensorboard.flush_secs must be int"),
])
def test_bad_logger_settings_say_what_to_fix(overrides, message):
    with pytest.raises(ConfigError) as caught:
        compose_config(overrides)
    assert message in str(caught.value)


def test_a_missing_tracker_package_names_the_extra_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(MissingDependencyError) as caught:
        compose_config(["logger=[tensorboard,wandb]"])
    assert "logger=wandb needs 'wandb', not installed: pip install 'agentcore-rl-harness[wandb]'" in str(caught.value)


def test_a_missing_package_is_a_usage_error_of_the_run(pytester, monkeypatch):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    pytester.makeconftest(
        "import importlib.util\nreal = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n == 'mlflow' else real(n, *a)\n")
    result = pytester.runpytest_subprocess("--agentcore-rl", "eval", "--agentcore-rl-set", "logger=mlflow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: agentcore-rl: logger=mlflow needs 'mlflow', not installed: pip install "
            "'agentcore-rl-harness[mlflow]'") in result.stderr.str()
    assert "Traceback" not in result.stderr.str()
