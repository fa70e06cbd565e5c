"""The pack stays out of `pytest tasks` (the bundled arithmetic suite that scripts/main-job trains
and measures); named, it is collected (test_migration_sanity.py runs it by its path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_the_bundled_suite_does_not_collect_the_pack():
    bundled = collected("tasks")
    assert "test_arith" in bundled and "test_migration" not in bundled
