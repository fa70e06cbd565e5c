"""The migration pack's modules live in tasks/migration/ (a task folder, run with its own folder on
sys.path as pytest runs it); these tests import them the same way."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

PACK = Path(__file__).resolve().parents[2] / "tasks" / "migration"
if str(PACK) not in sys.path:
    sys.path.insert(0, str(PACK))


@pytest.fixture(scope="session")
def pack_rows():
    """Every committed row, by level."""
    return {level: [json.loads(line) for line in (PACK / "data" / f"level{level}.jsonl").read_text().splitlines()]
            for level in (1, 2, 3)}


@pytest.fixture(scope="session")
def renderer(tiny_model_dir):
    """The tiny model's chat-template renderer, as the gateway renders the agent's turns."""
    from migration_harness import renderer_for

    return renderer_for(tiny_model_dir)


@pytest.fixture(scope="session")
def tasks():
    """The pack's task module (tasks/migration/test_migration.py)."""
    from migration_harness import load_pack_module

    return load_pack_module("migration_pack_tasks", "test_migration.py")
