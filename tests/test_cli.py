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
    assert "sweep" in out.stdout and "report" in out.stdout


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


def _write_run(path, rollouts, *, mode="eval", report=True):
    from agentcore_rl_harness.reports.build import build_report
    from agentcore_rl_harness.store import RunStore

    store = RunStore(path)
    for rollout in rollouts:
        store.append(rollout)
    store.close()
    store.write_config({"model": {"name": "tiny"}, "seed": 0})
    store.write_run_info({"mode": mode, "overrides": ["model=tiny"]})
    if report:
        stale = build_report(
            run_id=path.name, mode=mode, config={"model": {"name": "tiny"}}, overrides=[],
            versions={}, git_sha=None, started_at="2026-01-01T00:00:00+00:00", wall_time_s=1,
            rollouts=rollouts[:1], item_phase=mode, tags={"t": ["math"]})
        (path / "report.json").write_text(stale.model_dump_json())
    return path


def test_report_rerenders_every_report_from_rollouts(tmp_path):
    from agentcore_rl_harness.records import Status

    rollouts = [make_rollout("a"), make_rollout("b", status=Status.TASK_FAILED, success=False)]
    run = _write_run(tmp_path / "run", rollouts)
    out = _cli("report", str(run))
    assert out.returncode == 0, out.stderr
    assert "50.0% success (2 rollouts" in out.stdout
    report = json.loads((run / "report.json").read_text())
    assert report["overall"]["rollouts"] == 2
    assert report["run"]["started_at"] == "2026-01-01T00:00:00+00:00"  # the run section is kept
    assert report["tags"]["math"]["rollouts"] == 2  # and so are the task tags
    for name in ("report.md", "report.html", "junit.xml"):
        assert (run / name).stat().st_size > 0


def test_report_without_report_json_uses_config_and_run_info(tmp_path):
    run = _write_run(tmp_path / "run", [make_rollout("a")], report=False)
    out = _cli("report", str(run))
    assert out.returncode == 0, out.stderr
    report = json.loads((run / "report.json").read_text())
    assert report["run"]["mode"] == "eval" and report["run"]["overrides"] == ["model=tiny"]
    assert report["run"]["config"]["model"]["name"] == "tiny"
    assert (run / "report.html").is_file() and (run / "junit.xml").is_file()


def test_report_of_a_non_run_dir_fails_clearly(tmp_path):
    out = _cli("report", str(tmp_path))
    assert out.returncode == 2 and "rollouts.jsonl does not exist" in out.stderr


def test_report_compare_prints_and_writes_the_paired_comparison(tmp_path):
    from agentcore_rl_harness.records import Status

    def rollouts(good):
        return [make_rollout(f"r{i}", success=i < good, reward=float(i < good),
                             status=Status.COMPLETED if i < good else Status.TASK_FAILED)
                for i in range(12)]

    a = _write_run(tmp_path / "a", rollouts(2))
    b = _write_run(tmp_path / "b", rollouts(11))
    out = _cli("report", "compare", str(a), str(b))
    assert out.returncode == 0, out.stderr
    assert "16.7% -> 91.7% (+75.0pp) on 12 paired rollouts; a significant change" in out.stdout
    comparison = json.loads((b / "compare.json").read_text())
    assert comparison["overall"]["improved"] == 9 and comparison["overall"]["p_value"] < 0.01
    assert (b / "compare.md").read_text().startswith("# agentcore-rl compare")
    elsewhere = _cli("report", "compare", str(a), str(a), "--out", str(tmp_path / "same"))
    assert elsewhere.returncode == 0 and "success unchanged on every pair" in elsewhere.stdout
    assert json.loads((tmp_path / "same" / "compare.json").read_text())["overall"]["delta"] == 0


def test_report_with_two_dirs_but_no_compare_is_a_clear_error(tmp_path):
    out = _cli("report", str(tmp_path), str(tmp_path))
    assert out.returncode == 2 and "report compare A B" in out.stderr


@pytest.mark.slow
def test_gateway_server_serves_the_openai_sdk_and_the_admin_api(tiny_model_dir, tmp_path):
    # stderr to a file, not a pipe nobody reads until the end (a full pipe would block the server)
    stderr_path = tmp_path / "gateway-stderr.log"
    with open(stderr_path, "w") as stderr_file:
        process = subprocess.Popen(
            [*CLI, "gateway", "--model", str(tiny_model_dir), "--admin-token", "s3cret"],
            stdout=subprocess.PIPE, stderr=stderr_file, text=True,
        )
    try:
        line = process.stdout.readline()
        assert line.startswith("gateway: http://127.0.0.1:"), line + stderr_path.read_text()
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
        client.close()
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)  # bounds a hang; a loaded 2-core box has taken 30 s+
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError("the gateway did not exit on SIGINT; its stderr:\n"
                                 + stderr_path.read_text()[-4000:]) from None


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, subsub in _subparsers(sub):
                    yield f"{name} {inner}", subsub


def test_every_flag_of_every_command_has_a_help_string():
    from agentcore_rl_harness.cli import _parser

    undocumented = [
        f"{name} {action.option_strings[0] if action.option_strings else action.dest}"
        for name, sub in _subparsers(_parser()) for action in sub._actions
        if not action.help and action.dest != "help" and not action.__class__.__name__.startswith("_SubParsers")
    ]
    assert undocumented == []

