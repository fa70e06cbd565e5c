"""Which config keys the user set: those a recipe must leave alone (an explicit key always wins).

Explicit: a key in a `--agentcore-rl-set` / Hydra override, or written in the run's own config
file (`--agentcore-rl-config FILE`, or the project's configs/config.yaml). The packaged group
files (`model=tiny`, `eval=quick`) are defaults, not the user's word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def _leaves(node: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            keys |= _leaves(value, name + ".")
        keys.add(name)
    return keys


def file_keys(source: str) -> set[str]:
    """Keys (dotted, every level) written in a config source: a YAML file or a dir's config.yaml;
    none for the packaged config (`pkg://...`)."""
    import yaml

    path = Path(source)
    if source.startswith("pkg://") or not path.exists():
        return set()
    path = path / "config.yaml" if path.is_dir() else path
    data = yaml.safe_load(path.read_text()) or {}
    return _leaves({k: v for k, v in data.items() if k != "defaults"}) if isinstance(data, dict) else set()


def override_keys(overrides: Iterable[str]) -> set[str]:
    """`a.b=1`, `++a.b=1`, `+a.b=1` -> a.b (and its parents); `model=tiny` (a group) -> model."""
    keys = set()
    for override in overrides:
        key, sep, _ = override.partition("=")
        if not sep or key.startswith("~"):
            continue
        parts = key.lstrip("+").split(".")
        keys |= {".".join(parts[:n]) for n in range(1, len(parts) + 1)}
    return keys


def explicit_keys(overrides: Iterable[str], source: str) -> frozenset[str]:
    return frozenset(override_keys(overrides) | file_keys(source))


def is_explicit(key: str, explicit: frozenset[str]) -> bool:
    """`trainer.lr` is explicit when it, or an alias the config accepts for it, was set."""
    aliases = {"algo.group_size": ("algo.group_size",), "warmup": ("warmup.enabled",)}
    return any(name in explicit for name in aliases.get(key, (key,)))
