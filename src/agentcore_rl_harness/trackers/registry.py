"""Which tracker implements each `logger=<name>` option, imported only when selected.

A tracker is the module `trackers/<name>_tracker.py` (see `base`); the choices are the packaged
`conf/logger/*.yaml` files (`none` selects nothing).
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.resources import files
from types import ModuleType
from typing import Any

from ..config_schema import build
from ..errors import ConfigError, MissingDependencyError

CONF_GROUP = "logger"
NONE = "none"
# Config keys that would put a credential in config.yaml: trackers read them from the environment.
SECRET_WORDS = ("key", "token", "password", "secret")


def choices() -> list[str]:
    folder = files("agentcore_rl_harness.conf") / CONF_GROUP
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def tracker_module(name: str) -> ModuleType:
    """The module of tracker `name`; a ConfigError for an unknown one."""
    try:
        return importlib.import_module(f"{__package__}.{name}_tracker")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{name}_tracker":
            raise
        raise ConfigError(
            f"logger={name} is not available; valid choices: {choices()} (several at once: "
            f"logger=[tensorboard,wandb])"
        ) from None


def require_package(name: str, module: ModuleType) -> None:
    """A missing tracker package is a usage error at config time, with the install line."""
    missing = [package for package in module.PACKAGES if importlib.util.find_spec(package) is None]
    if missing:
        raise MissingDependencyError(
            f"logger={name} needs {' and '.join(repr(p) for p in missing)}, not installed: "
            f"pip install 'agentcore-rl-harness[{module.EXTRA}]' (or drop {name} from logger=...)"
        )


def check_no_secrets(name: str, keys: list[str]) -> None:
    found = [key for key in keys if any(word in key.lower() for word in SECRET_WORDS)]
    if found:
        raise ConfigError(
            f"logger.{name}: {', '.join(f'logger.{name}.{key}' for key in found)} would write a "
            f"credential into the run's config.yaml; trackers read API keys only from the "
            f"environment (e.g. WANDB_API_KEY, MLFLOW_TRACKING_TOKEN)"
        )


def build_logger_section(node: Any) -> dict[str, Any]:
    """The `logger` group (several options at once: `logger=[tensorboard,wandb]`): each selected
    tracker's typed node; an unknown tracker, a key that would hold a credential, or a tracker
    whose package is missing is an error here, before anything runs."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError(f"config node logger must be a mapping of tracker name -> settings "
                          f"(select trackers with logger=[tensorboard,wandb]), got {node!r}")
    section = {}
    for name, values in node.items():
        module = tracker_module(str(name))
        values = {} if values is None else values
        if isinstance(values, dict):
            check_no_secrets(str(name), list(values))
        section[name] = build(module.Config, values, f"logger.{name}")
        check = getattr(section[name], "validate", None)
        if check is not None:
            check()
        require_package(str(name), module)
    return section
