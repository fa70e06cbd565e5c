"""The viewer in a real headless Chromium (Debian's), driven over the DevTools protocol:
filter a finished run to failures, open a transcript, switch to the token view; watch a run in
progress grow; open the static bundle from disk; agent output stays text."""

import json
import os
import shutil
import time

import pytest

from agentcore_rl_harness.viewer.bundle import write_bundle
from agentcore_rl_harness.viewer.runs import Catalog

from viewer_cdp import CHROMIUM, Browser
from viewer_runs import HOSTILE, RUN_NAME, rollout, write_run

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium package: apt-get install -y chromium")


@pytest.fixture
def browser(tmp_path):
    opened = Browser(tmp_path / "profile")
    yield opened
    opened.close()


def _shot(browser, tmp_path, name):
    """A screenshot; kept in $VIEWER_SCREENSHOTS too when set (to look at them)."""
    path = browser.screenshot(tmp_path / f"{name}.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    if os.environ.get("VIEWER_SCREENSHOTS"):
        shutil.copy(path, os.environ["VIEWER_SCREENSHOTS"])
    return path


def _visible_rows(browser):
    return browser.js("[...document.querySelectorAll('#rollouts tr.rollout')]"
                      ".filter(r => !r.hidden).map(r => r.children[6].textContent)")


def _check_transcript_and_tokens(browser, tmp_path, prefix):
    browser.wait_for("document.body.dataset.ok === '1'")
    roles = browser.js("[...document.querySelectorAll('[data-pane=transcript] .msg .role')]"
                       ".map(r => r.firstChild.textContent.trim())")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert browser.js("document.querySelector('.call b').textContent") == "add"
    assert "AssertionError" in browser.js("document.getElementById('error').textContent")
    _shot(browser, tmp_path, f"{prefix}-transcript")
    assert browser.js("document.querySelector('[data-pane=tokens]').hidden") is True
    browser.click("#tab-tokens")
    assert browser.js("document.querySelector('[data-pane=tokens]').hidden") is False
    assert browser.js("document.querySelector('[data-pane=transcript]').hidden") is True
    masks = browser.js("[...document.querySelectorAll('.tokens .tok')].map(t => t.dataset.mask)")
    assert masks.count("1") > 10 and masks.count("0") > 5 and masks.count("") > 10
    trained = browser.js("[...document.querySelectorAll('.tokens .tok.trained')]"
                         ".map(t => t.textContent).join('')")
    assert "<tool_call>" in trained and "The answer is" in trained
    browser.click(".tokens .tok.trained")
    detail = browser.js("document.querySelector('.tokdetail').textContent")
    assert "loss mask 1" in detail and "logprob -0.2500" in detail and "sampled" in detail
    _shot(browser, tmp_path, f"{prefix}-tokens")


def test_a_finished_run_filter_failures_open_a_transcript_and_its_tokens(
        shared_viewer, browser, tmp_path):
    browser.open(shared_viewer.base + f"run/{RUN_NAME}/index.html")
    browser.wait_for("document.body.dataset.ok === '1'")
    assert len(_visible_rows(browser)) == 7
    assert "warm-up demonstrations" in browser.js("document.querySelector('.phases').textContent")
    assert browser.js("document.querySelectorAll('svg.curve polyline').length") == 2
    _shot(browser, tmp_path, "run")
    browser.js("document.querySelector('select[name=outcome]').value = 'failure'")
    browser.open_by(lambda: browser.js("document.getElementById('filters').submit()"))
    browser.wait_for("document.body.dataset.ok === '1'")
    assert _visible_rows(browser) == ["task_failed"] * 3
    assert "outcome=failure" in browser.js("location.search")
    _shot(browser, tmp_path, "failures")
    browser.open_by(lambda: browser.click("#rollouts tr.rollout a"))
    assert browser.js("location.pathname").endswith("/rollout/1.html")
    _check_transcript_and_tokens(browser, tmp_path, "server")


def test_agent_output_shows_as_text_and_runs_nothing(shared_viewer, browser, tmp_path):
    browser.open(shared_viewer.base + f"run/{RUN_NAME}/rollout/3.html")
    browser.wait_for("document.body.dataset.ok === '1'")
    assert HOSTILE in browser.js("document.getElementById('result').textContent")
    assert browser.js("document.scripts.length") == 1
    assert browser.dialogs == [] and browser.console == []


def test_a_running_run_shows_a_new_rollout_when_it_is_written(
        tmp_path, tiny_tokenizer, start_viewer, browser):
    run_dir = tmp_path / "outputs" / "live-run"
    store = write_run(run_dir, tiny_tokenizer)  # open: the run is still going
    viewer = start_viewer(run_dir.parent)
    browser.open(viewer.base + "run/live-run/index.html")
    browser.wait_for("document.body.dataset.ok === '1'")
    assert browser.js("document.getElementById('live').textContent") == "live"
    assert browser.js("document.getElementById('total').textContent") == "7"
    assert browser.js("document.getElementById('inflight').hidden") is True  # no inflight.json yet
    _inflight(run_dir, [{"task": HOSTILE, "row_id": "just-finished", "sample_index": 0, "phase": "post",
                         "step": None, "state": "running", "session_id": "arl-x", "started_at": time.time() - 3}])
    browser.wait_for("!document.getElementById('inflight').hidden")  # the live poll shows it
    assert browser.js("[...document.querySelector('#inflight tbody tr').children].map(c => c.textContent)")[:5] \
        == [HOSTILE, "just-finished", "0", "post", "running"]  # as text: nothing ran
    _inflight(run_dir, [])
    store.append(rollout(tiny_tokenizer, 7, phase="post", row_id="just-finished"))
    browser.wait_for("document.querySelector('#rollouts tr.new') !== null")
    assert browser.js("document.querySelector('#rollouts tr.new').children[2].textContent") == \
        "just-finished"
    assert browser.js("document.getElementById('total').textContent") == "8"
    assert browser.js("document.getElementById('matched').textContent").startswith("1 new since")
    browser.wait_for("document.querySelectorAll('#inflight tbody tr').length === 0")
    _shot(browser, tmp_path, "live")
    (run_dir / "inflight.json").unlink()  # the run ended
    browser.wait_for("document.getElementById('inflight').hidden")
    assert browser.dialogs == []
    store.close()
    browser.open_by(lambda: browser.click("#rollouts tr.new a"))
    assert browser.js("location.pathname").endswith("/rollout/7.html")


def test_the_bundle_renders_offline_from_disk(shared_run, browser, tmp_path):
    page = write_bundle(Catalog([shared_run]), tmp_path / "bundle")
    browser.open(page.as_uri())
    browser.wait_for("document.body.dataset.ok === '1'")
    browser.open_by(lambda: browser.click("tr.run-row a"))
    browser.wait_for("document.body.dataset.ok === '1'")
    assert len(_visible_rows(browser)) == 7
    assert browser.js("document.getElementById('live')") is None
    assert "A static copy" in browser.js("document.getElementById('progress').textContent")
    browser.js("document.querySelector('select[name=outcome]').value = 'failure'")
    browser.click("#filters button")
    assert _visible_rows(browser) == ["task_failed"] * 3
    assert browser.js("document.getElementById('matched').textContent") == "3 of 7 match."
    _shot(browser, tmp_path, "bundle-failures")
    browser.open_by(lambda: browser.js(
        "[...document.querySelectorAll('#rollouts tr.rollout')].find(r => !r.hidden)"
        ".querySelector('a').click()"))
    _check_transcript_and_tokens(browser, tmp_path, "bundle")
    assert browser.js("performance.getEntriesByType('resource').length") == 0  # nothing fetched
    assert browser.console == []


def _inflight(run_dir, cases):
    temporary = run_dir / ".inflight.tmp"  # replaced whole, as the run writes it
    temporary.write_text(json.dumps({"updated_at": time.time(), "cases": cases}))
    os.replace(temporary, run_dir / "inflight.json")
