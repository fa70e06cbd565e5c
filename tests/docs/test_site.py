"""The docs site builds with `mkdocs build --strict`: a broken link, a missing anchor or a page
left out of the nav fails CI. The second test proves the check bites."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS

REPO = DOCS.parent
README_LIMIT = 200


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=300, env=env)


def test_the_site_builds_strictly(tmp_path):
    done = _build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in ("tutorial/index.html", "concepts/index.html", "agents/index.html", "tasks/index.html",
                 "reference/configuration/index.html", "benchmarks/index.html"):
        assert page in built


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [a page that is gone](gone.md) and [an anchor](tasks.md#nowhere).\n")
    done = _build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "gone.md" in done.stderr and "nowhere" in done.stderr


def test_the_readme_is_the_front_door():
    """At most 200 lines, the two quick-start commands CI and users run, and links into the docs
    that exist."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LIMIT
    assert "bash scripts/main-job" in readme and "bash scripts/test" in readme
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into docs/"
    for link in links:
        assert (REPO / link).is_file(), link


@pytest.mark.parametrize("script", ["scripts/main-job", "scripts/test"])
def test_the_readme_quick_start_commands_exist(script):
    assert (REPO / script).is_file()
