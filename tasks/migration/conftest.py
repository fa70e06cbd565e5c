"""The migration pack runs when it is named (`pytest --agentcore-rl eval tasks/migration`), not
as part of `pytest tasks`: that is the bundled arithmetic suite the main job trains and measures
with the repository's configs/ (48-token replies, too short for a file)."""

from __future__ import annotations

from pathlib import Path

PACK = Path(__file__).resolve().parent


def _named(config) -> bool:
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0])
        path = (path if path.is_absolute() else Path(config.invocation_params.dir) / path).resolve()
        if path == PACK or PACK in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if collection_path.parent == PACK and collection_path.suffix == ".py" and not _named(config):
        return True
    return None
