"""Modules stay small: one over 400 lines says why in its docstring, in a paragraph that starts
"Long because" (STYLE.md: when a file grows banner comments, split it)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcore_rl_harness

ROOT = Path(agentcore_rl_harness.__file__).parent
LIMIT = 400


def long_modules_without_a_reason(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n"))
        if lines <= limit:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.startswith("Long because") for line in docstring.splitlines()):
            found.append(f"{path.relative_to(root)} ({lines} lines)")
    return found


def test_every_long_module_says_why_it_is_one_module():
    assert long_modules_without_a_reason() == [], (
        "split these modules, or add a paragraph starting 'Long because' to their docstring"
    )


def test_the_rule_finds_a_long_module_without_a_reason(tmp_path):
    (tmp_path / "short.py").write_text('"""Short."""\n')
    (tmp_path / "long.py").write_text('"""Long, and silent about it."""\n' + "x = 1\n" * 400)
    (tmp_path / "said.py").write_text('"""Long.\n\nLong because it must be.\n"""\n' + "x = 1\n" * 400)
    assert long_modules_without_a_reason(tmp_path) == ["long.py (401 lines)"]
