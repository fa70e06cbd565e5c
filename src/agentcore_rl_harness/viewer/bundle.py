"""`agentcore-rl view --bundle OUT`: the viewer's pages written as static files.

The folder opens from disk (`OUT/index.html`) with nothing fetched: the same templates, inline
script and style, relative links; the rollout table is filtered in the page by its script. A run
with more than `MAX_ROLLOUT_PAGES` rollouts keeps its first ones only, in the table and as pages
(the page says so; `agentcore-rl view` serves them all).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import HarnessError
from .index import Filter
from .pages import PAIRED_PHASES, compare_page, rollout_page, run_page, runs_page
from .runs import Catalog

MAX_ROLLOUT_PAGES = 5000
BUNDLE_TOKENS = 20_000
MARKER = ".agentcore-rl-view-bundle"


def write_bundle(catalog: Catalog, out: Path, *, tokenizer: Path | None = None,
                 progress: Callable[[str], None] = lambda line: None) -> Path:
    """Write every page of `catalog`'s runs under `out`; return `out/index.html`."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise HarnessError(f"--bundle {out}: exists and is not an empty folder or an earlier "
                           "bundle; give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by agentcore-rl view --bundle\n")
    runs = catalog.runs()
    _write(out / "index.html", runs_page(runs, mode="bundle"))
    for run in runs:
        total = run.index.refresh()
        folder = out / "run" / run.key
        _write(folder / "index.html", run_page(run, Filter(), start=0,
                                               limit=min(total, MAX_ROLLOUT_PAGES), mode="bundle"))
        for row in run.index.rows()[:MAX_ROLLOUT_PAGES]:
            _write(folder / "rollout" / f"{row.number}.html", rollout_page(
                run, row.number, tokenizer_dir=tokenizer, token_start=0, mode="bundle",
                token_limit=BUNDLE_TOKENS))
            if row.phase in PAIRED_PHASES:
                _write(folder / "compare" / f"{row.number}.html", compare_page(
                    run, row.number, tokenizer_dir=tokenizer, mode="bundle"))
        progress(f"{run.key}: {min(total, MAX_ROLLOUT_PAGES)} of {total} rollout pages")
    return out / "index.html"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
