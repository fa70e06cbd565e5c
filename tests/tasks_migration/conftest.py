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
