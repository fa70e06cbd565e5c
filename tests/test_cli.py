"""The `agentcore-rl` console script, run as a real subprocess."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

from test_store import make_rollout

CLI = [sys.executable, "-m", "agentcore_rl_harness.cli"]


def _cli(*args, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_console_script_is_installed():
    assert shutil.which("agentcore-rl"), "pip install -e . registers the agentcore-rl script"
    out = subprocess.run(["agentcore-rl", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "models" in out.stdout and "gateway" in out.stdout


def test_models_prepare_and_list(tiny_model_dir):
    prepared = _cli("models", "prepare", "tiny")
    assert prepared.returncode == 0, prepared.stderr
    assert prepared.stdout.strip().splitlines()[-1] == str(tiny_model_dir)
    listed = _cli("models", "list")
    assert f"tiny\tprepared\t{tiny_model_dir}" in listed.stdout
    assert "smollm2-135m-instruct" in listed.stdout


def test_unknown_model_is_a_clear_error_with_exit_2():
    out = _cli("models", "prepare", "gpt-17")
    assert out.returncode == 2
    assert "gpt-17" in out.stderr and "tiny" in out.stderr


def test_report_rerenders_from_rollouts(tmp_path):
    from agentcore_rl_harness.records import Status
    from agentcore_rl_harness.reports.build import summarize, summarize_by_task
    from agentcore_rl_harness.reports.model import Report, RunInfo
    from agentcore_rl_harness.store import RunStore

    store = RunStore(tmp_path)
    rollouts = [make_rollout("a"), make_rollout("b", status=Status.TASK_FAILED, success=False)]
    for rollout in rollouts:
        store.append(rollout)
    store.close()
    run = RunInfo(id="r", mode="eval", config={"model": {"name": "tiny"}}, overrides=[],
                  versions={}, git_sha=None, started_at="2026-01-01T00:00:00+00:00", wall_time_s=1)
    stale = Report(run=run, overall=summarize(rollouts[:1]), tasks=summarize_by_task(rollouts[:1]))
    (tmp_path / "report.json").write_text(stale.model_dump_json())
    out = _cli("report", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "50.0% success (2 rollouts" in out.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["overall"]["rollouts"] == 2
    assert (tmp_path / "report.md").is_file() and (tmp_path / "junit.xml").is_file()


def test_report_of_a_non_run_dir_fails_clearly(tmp_path):
    out = _cli("report", str(tmp_path))
    assert out.returncode == 2 and "rollouts.jsonl does not exist" in out.stderr


@pytest.mark.slow
def test_gateway_server_serves_the_openai_sdk_and_the_admin_api(tiny_model_dir):
    process = subprocess.Popen(
        [*CLI, "gateway", "--model", str(tiny_model_dir), "--admin-token", "s3cret"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("gateway: http://127.0.0.1:"), line + process.stderr.read()
        base_url = line.split()[1]
        root = base_url.removesuffix("/v1")
        assert httpx.post(f"{root}/admin/sessions").status_code == 401  # admin needs the token
        opened = httpx.post(f"{root}/admin/sessions", headers={"X-Admin-Token": "s3cret"},
                            json={"sampling": {"temperature": 1.0, "max_tokens": 5, "seed": 1}})
        session_id = opened.json()["session_id"]
        client = openai.OpenAI(base_url=base_url, api_key=session_id)
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=50)
        assert reply.usage.completion_tokens <= 5  # the session's sampling wins
        finished = httpx.post(f"{root}/admin/sessions/{session_id}/finish",
                              headers={"X-Admin-Token": "s3cret"}).json()
        (trace,) = finished["traces"]
        assert sum(trace["loss_mask"]) == reply.usage.completion_tokens
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
