"""The code blocks of a docs page, as the page's reader meets them, for the tests that run them.

A fenced block titled with a path (```python title="agent.py") is a file the reader creates; a
```bash block is commands the reader runs, unless the line before it is
`<!-- docs-test: skip (why) -->`. `page_script` turns a page into one bash script that does
both, in the page's order, so `cd` and the files carry over as they do for the reader.
Indented blocks (inside mkdocs-material content tabs) count as well.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)(?P<attrs>[^\n`]*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
_SKIP = re.compile(r"^\s*<!-- docs-test: skip\b")


@dataclass(frozen=True)
class Block:
    lang: str
    title: str | None
    text: str
    skipped: bool
    line: int

    @property
    def runs(self) -> bool:
        return self.lang in ("bash", "sh") and not self.skipped and self.title is None


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        start, indent = index, fence["indent"]
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page.name}:{start + 1}: a code block that never closes")
        title = _TITLE.search(fence["attrs"])
        body = textwrap.dedent("\n".join(line[len(indent):] if line.startswith(indent) else line
                                         for line in lines[start + 1:end]))
        skipped = start > 0 and bool(_SKIP.match(lines[start - 1]))
        found.append(Block(fence["lang"], title["title"] if title else None, body + "\n", skipped, start + 1))
        index = end + 1
    return found


def files(page: Path) -> dict[str, str]:
    """path -> content of every titled block."""
    return {block.title: block.text for block in blocks(page) if block.title}


def page_script(page: Path) -> str:
    """One bash script: every titled block written to its file, every bash block run, in order."""
    parts = ["set -euo pipefail"]
    for block in blocks(page):
        if block.title:
            marker = "DOCS_TEST_EOF"
            assert marker not in block.text, f"{page.name}:{block.line} holds {marker}"
            parts.append(f"mkdir -p \"$(dirname '{block.title}')\"\ncat > '{block.title}' <<'{marker}'\n"
                         f"{block.text}{marker}")
        elif block.runs:
            parts.append(f"echo '+ {page.name}:{block.line}'\n{block.text}")
    return "\n".join(parts) + "\n"
