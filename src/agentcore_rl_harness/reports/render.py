"""Write report.json, report.md, report.html and junit.xml from the report model and rollouts.

Each format has its own module (`markdown`, `junit`, `html`); the shared text pieces are in
`text`. Their names stay importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..records import Rollout
from .build import deduplicate
from .junit import render_junit
from .markdown import render_markdown
from .model import REPORT_FORMATS, Report
from .text import delta_line, delta_table, md_cell, num, pct, pp, verdict, verdict_line

_pct, _num, _pp, _md_cell = pct, num, pp, md_cell  # the old private names, still importable

__all__ = [
    "delta_line", "delta_table", "render_junit", "render_markdown", "verdict", "verdict_line",
    "write_reports",
]

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def write_reports(
    run_dir: Path, report: Report, rollouts: Sequence[Rollout], *, tokenizer: Path | None = None,
    formats: Sequence[str] = REPORT_FORMATS, step_summary: bool = True,
) -> None:
    """The report files `formats` names (default all four); report.md is also appended to
    $GITHUB_STEP_SUMMARY when that is set and `step_summary` is true, naming the run directory
    instead of linking the files (relative links are dead on GitHub's summary page).

    `tokenizer` (an HF folder; default the run's own model, when on this machine) decodes the
    tokens: transcripts in report.html, excerpts of failed rollouts in report.md.
    """
    from .html import render_html
    from .tokenizer import find_tokenizer, model_name

    run_dir = Path(run_dir)
    unique, _ = deduplicate(rollouts)
    decoder = find_tokenizer(model_name(report.run.config), tokenizer)
    markdown = render_markdown(report, rollouts=unique, tokenizer=decoder)
    writers = {
        "json": ("report.json", lambda: report.model_dump_json(indent=2)),
        "md": ("report.md", lambda: markdown),
        "html": ("report.html", lambda: render_html(report, unique, tokenizer=decoder)),
        "junit": ("junit.xml", lambda: render_junit(report, unique)),
    }
    for name in formats:
        filename, produce = writers[name]
        content = produce()
        if isinstance(content, bytes):
            (run_dir / filename).write_bytes(content)
        else:
            (run_dir / filename).write_text(content, encoding="utf-8")
    summary_path = os.environ.get(STEP_SUMMARY_ENV)
    if step_summary and summary_path:
        summary = render_markdown(report, files_at=run_dir.resolve(), rollouts=unique, tokenizer=decoder)
        with open(summary_path, "a", encoding="utf-8") as handle:
            handle.write(summary + "\n")
