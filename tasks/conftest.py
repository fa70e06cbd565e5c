"""Task packs (`tasks/<pack>/`) run when they are named: `pytest --agentcore-rl run tasks` is the
bundled arithmetic suite (the main job), `pytest --agentcore-rl eval tasks/office` a pack."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if collection_path.parent != HERE or not collection_path.is_dir():
        return None
    pack = collection_path.resolve()
    for arg in config.args:
        named = Path(arg.split("::", 1)[0]).resolve()
        if named == pack or pack in named.parents:
            return None
    return True
