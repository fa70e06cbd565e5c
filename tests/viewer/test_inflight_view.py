"""A running run's inflight.json on its viewer page: the in-flight table, its live refresh
(rows.json), "stale" when the file stopped being rewritten, gone when the run finished."""

import html
import json
import os
import re
import time
import urllib.request

from viewer_runs import HOSTILE, RUN_NAME

PAGE = f"run/{RUN_NAME}/index.html"


def _get(url):
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read().decode()


def _inflight_table(page):
    section = re.search(r'<section id="inflight"( hidden)?>(.*?)</section>', page, re.S)
    assert section is not None, "the run page has no in-flight section"
    body = section.group(2).split("<tbody>", 1)[1]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    cells = [[html.unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.S)] for row in rows]
    return section.group(1) is None, cells


def _write(run_dir, cases):
    (run_dir / "inflight.json").write_text(json.dumps({"updated_at": time.time(), "cases": cases}))


def test_the_run_page_shows_what_is_in_flight_escaped_then_stale_then_gone(run_dir, start_viewer):
    now = time.time()
    _write(run_dir, [
        {"task": HOSTILE, "row_id": "q7", "sample_index": 1, "phase": "train", "step": 2, "state": "running",
         "session_id": "arl-abc", "started_at": now - 42, "submitted_at": now - 50},
        {"task": "test_arith", "row_id": "q8", "sample_index": 0, "phase": "eval", "step": None,
         "state": "queued", "session_id": None, "started_at": None, "submitted_at": now - 1}])
    viewer = start_viewer(run_dir)
    page = _get(viewer.base + PAGE)
    shown, rows = _inflight_table(page)
    assert shown and HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert rows[0][:5] == [HOSTILE, "q7", "1", "train (step 2)", "running"] and rows[0][6] == "arl-abc"
    assert 42 <= int(rows[0][5].removesuffix(" s")) < 100  # running for N s
    assert rows[1] == ["test_arith", "q8", "0", "eval", "queued", "—", ""]
    assert 'id="inflight-stale" class="badge stale" hidden' in page

    polled = json.loads(_get(viewer.base + f"run/{RUN_NAME}/rows.json?after=7"))["inflight"]  # the live poll
    assert polled["stale"] is False and [row[:2] for row in polled["rows"]] == [[HOSTILE, "q7"], ["test_arith", "q8"]]

    old = time.time() - 300  # the run stopped rewriting it (killed without its end)
    os.utime(run_dir / "inflight.json", (old, old))
    page = _get(viewer.base + PAGE)
    assert 'id="inflight-stale" class="badge stale">stale' in page
    assert json.loads(_get(viewer.base + f"run/{RUN_NAME}/rows.json"))["inflight"]["stale"] is True

    (run_dir / "report.json").write_text(json.dumps({"run": {"mode": "run"}}))  # the run finished
    assert _inflight_table(_get(viewer.base + PAGE)) == (False, [])
    assert json.loads(_get(viewer.base + f"run/{RUN_NAME}/rows.json"))["inflight"] is None


def test_no_inflight_file_no_table(run_dir, start_viewer):
    viewer = start_viewer(run_dir)
    assert _inflight_table(_get(viewer.base + PAGE)) == (False, [])
    assert json.loads(_get(viewer.base + f"run/{RUN_NAME}/rows.json"))["inflight"] is None


def test_workers_files_merge_and_a_dead_workers_file_beside_live_ones_is_dropped(tmp_path):
    from agentcore_rl_harness.viewer.inflight import read_inflight

    now = time.time()
    entry = {"task": "t", "sample_index": 0, "phase": "eval", "state": "running", "started_at": now - 5}
    for name, row, age in (("inflight-11.json", "a", 1), ("inflight-12.json", "b", 2), ("inflight-13.json", "dead", 600)):
        (tmp_path / name).write_text(json.dumps({"cases": [{**entry, "row_id": row}]}))
        os.utime(tmp_path / name, (now - age, now - age))
    seen = read_inflight(tmp_path, now=now)
    assert sorted(case.row_id for case in seen.cases) == ["a", "b"] and not seen.stale
    (tmp_path / "inflight-11.json").unlink()
    (tmp_path / "inflight-12.json").unlink()
    left = read_inflight(tmp_path, now=now)  # only the dead one: shown, as stale
    assert [case.row_id for case in left.cases] == ["dead"] and left.stale
