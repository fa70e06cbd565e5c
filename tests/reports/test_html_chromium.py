"""report.html in a real headless Chromium: it renders, its script runs, nothing is injected."""

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agentcore_rl_harness.reports.render import write_reports

sys.path.insert(0, str(Path(__file__).parent))
from test_html import hostile_report, hostile_rollouts  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium package: apt-get install -y chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def _chromium(tmp_path, name, *args):
    profile = tmp_path / f"profile-{name}"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=60,
    )


class _Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.body, self.rollout_rows, self.tags, self.handlers = {}, 0, [], []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append(tag)
        self.handlers += [name for name in attributes if name.startswith("on")]
        if tag == "body":
            self.body = attributes
        if tag == "tr" and "rollout" in (attributes.get("class") or ""):
            self.rollout_rows += 1


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    rollouts = hostile_rollouts()
    write_reports(run_dir, hostile_report(rollouts), rollouts)
    return run_dir / "report.html"


def test_report_renders_runs_its_script_and_injects_nothing(page, tmp_path):
    url = page.as_uri()
    dumped = _chromium(tmp_path, "dom", "--enable-logging=stderr", "--v=0",
                       "--virtual-time-budget=5000", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    assert dom.body.get("data-ok") == "6", "the page's script did not finish"
    assert dom.rollout_rows == 6
    assert "img" not in dom.tags and dom.handlers == []
    assert dom.tags.count("script") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dumped.stdout
    console = [line for line in dumped.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "Refused" in line], console

    shot = tmp_path / "report.png"
    taken = _chromium(tmp_path, "shot", f"--screenshot={shot}", "--window-size=1280,1600", url)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hostile_page_would_be_caught_by_this_check(tmp_path):
    """The console check is not vacuous: an error and an injected handler are seen."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('x')</script>"
                   "<img src=x onerror=console.log(2)></body></html>")  # no alert(): it blocks
    dumped = _chromium(tmp_path, "bad", "--enable-logging=stderr", "--v=0",
                       "--virtual-time-budget=3000", "--dump-dom", bad.as_uri())
    assert "Uncaught Error: x" in dumped.stderr
    dom = _Dom()
    dom.feed(dumped.stdout)
    assert "img" in dom.tags and "onerror" in dom.handlers
