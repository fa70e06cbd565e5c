"""`agentcore-rl view` as a real process on loopback: access rules, escaping, files, bundle."""

import http.client
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.viewer.bundle import write_bundle
from agentcore_rl_harness.viewer.runs import Catalog
from agentcore_rl_harness.viewer.serve import check_bind

from viewer_runs import HOSTILE

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=180) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


def _raw(url, path, headers=None):
    """A GET whose path is sent exactly as written (no client-side `..` clean-up)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=180)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, body


def _view(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "agentcore_rl_harness.cli", "view", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_a_non_loopback_bind_without_a_token_is_refused(run_dir):
    result = _view(run_dir, "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "--host 0.0.0.0 is not a loopback address and no --token was given" in result.stderr
    assert "--token auto" in result.stderr
    with pytest.raises(HarnessError, match="at least 8"):
        check_bind("0.0.0.0", "short")
    assert check_bind("127.0.0.1", None) is None and check_bind("localhost", None) is None


def test_bound_elsewhere_every_request_needs_the_token(run_dir, start_viewer):
    viewer = start_viewer(run_dir, "--host", "0.0.0.0", "--token", "auto")
    token = viewer.url.split("?token=")[1]
    local = viewer.base.replace("0.0.0.0", "127.0.0.1")
    status, body, _ = _get(local)
    assert status == 401 and "?token=" in body
    assert _get(local + "?token=wrong-token")[0] == 401
    status, body, headers = _get(f"{local}?token={token}")
    assert status == 200 and "20260101T000000Z-run" in body
    cookie = headers["set-cookie"].split(";")[0]
    assert "httponly" in headers["set-cookie"].lower()
    assert _get(local + "run/20260101T000000Z-run/index.html", {"Cookie": cookie})[0] == 200


def test_loopback_serves_loopback_host_names_only(shared_viewer):
    viewer = shared_viewer
    assert _get(viewer.base)[0] == 200
    status, body = _raw(viewer.base, "/", {"Host": "attacker.example:80"})
    assert status == 403 and "loopback only" in body


def test_agent_output_is_escaped_and_the_page_has_one_script(shared_viewer):
    viewer = shared_viewer
    status, page, headers = _get(viewer.base + "run/20260101T000000Z-run/rollout/3.html")
    assert status == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and HOSTILE not in page
    assert page.count("<script>") == 1 and "Content-Security-Policy" in page
    assert headers["X-Content-Type-Options"] == "nosniff"
    table = _get(viewer.base + "run/20260101T000000Z-run/index.html?q=alert")[1]
    assert HOSTILE not in table and "1 of 7 match" in table


def test_files_outside_the_run_directory_are_refused(shared_viewer, shared_run):
    viewer, secret = shared_viewer, shared_run.parent.parent / "secret.txt"
    prefix = "/run/20260101T000000Z-run/files/"
    assert _raw(viewer.base, prefix + "config.yaml")[0] == 200
    for path in ("../../secret.txt", "%2e%2e/%2e%2e/secret.txt", "..%2f..%2fsecret.txt",
                 "/" + str(secret).lstrip("/"), "link"):
        status, body = _raw(viewer.base, prefix + path)
        assert status in (403, 404) and "secret" not in body.replace("secret.txt", ""), (path, body)
        assert status == 403 or "no such file" in body, (path, body)
    assert _raw(viewer.base, prefix + "link")[0] == 403


def test_unknown_runs_and_rollouts_say_what_to_do(shared_viewer):
    viewer = shared_viewer
    status, body, _ = _get(viewer.base + "run/elsewhere/index.html")
    assert status == 404 and "not open in this viewer" in body
    status, body, _ = _get(viewer.base + "run/20260101T000000Z-run/rollout/70.html")
    assert status == 404 and "has 7 rollouts; there is no #70" in body
    status, body, _ = _get(viewer.base + "run/20260101T000000Z-run/index.html?outcome=bad")
    assert status == 400 and "outcome='bad'" in body
    status, body, _ = _get(viewer.base + "run/20260101T000000Z-run/session/session-4")
    assert status == 200 and "sample 0" in body and "post" in body  # redirected to rollout 4


def test_a_path_without_runs_is_an_error(tmp_path):
    result = _view(tmp_path, "--port", "0")
    assert result.returncode == 2 and "no run directory here" in result.stderr


def test_the_bundle_is_a_folder_of_pages_and_refuses_a_foreign_folder(run_dir, tmp_path):
    out = tmp_path / "bundle"
    result = _view(run_dir, "--bundle", out)
    assert result.returncode == 0, result.stderr
    run = out / "run" / "20260101T000000Z-run"
    assert (out / "index.html").is_file() and (run / "index.html").is_file()
    assert sorted(p.name for p in (run / "rollout").iterdir()) == [f"{n}.html" for n in range(7)]
    assert (run / "compare" / "1.html").is_file()
    assert "&lt;script&gt;alert(1)" in (run / "rollout" / "3.html").read_text()
    catalog = Catalog([run_dir])
    assert write_bundle(catalog, out) == out / "index.html"  # an earlier bundle may be rewritten
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    with pytest.raises(HarnessError, match="not an empty folder or an earlier bundle"):
        write_bundle(catalog, foreign)


def test_report_html_links_a_rollout_to_its_viewer_page(shared_run, shared_viewer):
    from agentcore_rl_harness.reports.load import load_run
    from agentcore_rl_harness.reports.render import write_reports

    loaded = load_run(shared_run)
    write_reports(loaded.run_dir, loaded.report, loaded.rollouts)
    html = (shared_run / "report.html").read_text()
    links = re.findall(r'class="viewer-link" href="([^"]+)"', html)
    assert len(links) == 7
    link = next(link for link in links if link.endswith("/session/session-4"))
    assert link == f"http://127.0.0.1:7576/run/{shared_run.name}/session/session-4"
    status, page, _ = _get(link.replace("http://127.0.0.1:7576/", shared_viewer.base))
    assert status == 200 and "rollout 4</nav>" in page


def test_a_bundle_of_a_large_run_keeps_its_first_rollouts_and_says_so(run_dir, tmp_path, monkeypatch):
    from agentcore_rl_harness.viewer import bundle

    monkeypatch.setattr(bundle, "MAX_ROLLOUT_PAGES", 3)
    out = tmp_path / "bundle"
    write_bundle(Catalog([run_dir]), out)
    run = out / "run" / "20260101T000000Z-run"
    assert sorted(p.name for p in (run / "rollout").iterdir()) == ["0.html", "1.html", "2.html"]
    page = (run / "index.html").read_text()
    assert "keeps the first 3 of 7 rollouts" in page and page.count('<tr class="rollout') == 3
