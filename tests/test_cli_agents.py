"""cli_agents.py and scripts/cli-agents: each CLI's command on its own wire, the error naming how
to install a missing CLI, and the installer's warm path (no npm call) and failure paths (npm
absent, failing, hanging). The CLIs running for real: tests/tasks_migration/test_migration_cli_agents.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agentcore_rl_harness.cli_agents import (CONTEXT_WINDOW_ENV, NPM_PACKAGES, PREFIX_ENV, cli_binary, cli_command,
                                             cli_prefix, context_window)
from agentcore_rl_harness.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cli-agents"
TOOLS = ("cat", "rm", "mkdir", "mktemp", "mv", "tail", "timeout", "dirname", "sleep")


def installed_prefix(prefix: Path, pins: str = " ".join(NPM_PACKAGES.values())) -> Path:
    """A prefix laid out as scripts/cli-agents leaves it (stand-in executables)."""
    (prefix / "node_modules" / ".bin").mkdir(parents=True)
    for cli in NPM_PACKAGES:
        binary = prefix / "node_modules" / ".bin" / cli
        binary.write_text("#!/bin/sh\necho 1.0\n")
        binary.chmod(0o755)
    (prefix / ".pins").write_text(pins + "\n")
    return prefix


def run_script(prefix: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """scripts/cli-agents with only `bin_dir` on PATH (the coreutils it uses, plus any fake npm)."""
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS:
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    return subprocess.run([shutil.which("bash"), str(SCRIPT), str(prefix)], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "HOME": str(prefix.parent), **env})


def fake(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_codex_speaks_responses_and_claude_code_messages_to_the_gateway(tmp_path):
    prefix = installed_prefix(tmp_path / "cli")
    base_url = "http://127.0.0.1:8000/v1"
    codex = cli_command("codex", prompt="fix it", base_url=base_url, api_key="key-1", model_id="m", prefix=prefix)
    assert codex.argv[:2] == (str(prefix / "node_modules" / ".bin" / "codex"), "exec")
    assert codex.argv[-3:] == ("-m", "m", "fix it")
    assert (f'model_providers.arl={{name="arl", base_url="{base_url}", env_key="ARL_API_KEY", '
            'wire_api="responses"}') in codex.argv
    assert codex.env == {"ARL_API_KEY": "key-1"}  # the session key, in the variable the provider names
    claude = cli_command("claude", prompt="fix it", base_url=base_url, api_key="key-1", model_id="m", prefix=prefix)
    assert claude.argv == (str(prefix / "node_modules" / ".bin" / "claude"), "-p", "fix it", "--model", "m",
                           "--allowedTools", "Bash")
    assert claude.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"  # the Anthropic SDK adds /v1 itself
    assert claude.env["ANTHROPIC_API_KEY"] == "key-1"


def test_each_cli_is_told_the_served_context(tmp_path, monkeypatch):
    prefix = installed_prefix(tmp_path / "cli")
    common = dict(prompt="p", base_url="http://127.0.0.1:8000/v1", api_key="k", model_id="m", prefix=prefix)
    assert "model_context_window=40960" in cli_command("codex", window=40960, **common).argv
    assert not any("model_context_window" in arg for arg in cli_command("codex", **common).argv)
    assert cli_command("claude", window=131072, **common).env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072"
    monkeypatch.setenv(CONTEXT_WINDOW_ENV, "40960")
    assert context_window() == 40960
    monkeypatch.setenv(CONTEXT_WINDOW_ENV, "40k")
    with pytest.raises(ValueError, match=r"AGENTCORE_RL_CLI_CONTEXT_WINDOW='40k' is not a number of tokens"):
        context_window()
    monkeypatch.delenv(CONTEXT_WINDOW_ENV)
    assert context_window() is None


def test_a_missing_cli_says_how_to_install_it_and_reach_it_from_a_session(tmp_path):
    with pytest.raises(MissingDependencyError) as caught:
        cli_binary("claude", tmp_path / "empty")
    message = str(caught.value)
    assert "@anthropic-ai/claude-code@2.1.332" in message and str(tmp_path / "empty") in message
    assert "scripts/cli-agents" in message
    assert f"runtime.readable_paths=[{tmp_path / 'empty'}]" in message and PREFIX_ENV in message
    with pytest.raises(ValueError, match=r"unknown CLI agent 'opencode'; choose one of \['codex', 'claude'\]"):
        cli_binary("opencode", tmp_path)


def test_the_prefix_is_the_named_one_else_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(PREFIX_ENV, str(tmp_path))
    assert cli_prefix() == tmp_path
    monkeypatch.delenv(PREFIX_ENV)
    assert cli_prefix() == Path.home() / ".cache" / "agentcore-rl" / "cli-agents"


def test_the_installer_pins_what_the_module_pins():
    pins = re.search(r"^PINS=\((.*)\)$", SCRIPT.read_text(), re.M).group(1)
    assert pins.replace('"', "").split() == list(NPM_PACKAGES.values())


def test_a_warm_prefix_is_reused_without_npm(tmp_path):
    prefix = installed_prefix(tmp_path / "cli")
    started = time.monotonic()
    done = run_script(prefix, tmp_path / "bin")  # no node or npm on PATH: it must not need them
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"export AGENTCORE_RL_CLI_AGENTS={prefix}"
    assert time.monotonic() - started < 5


def test_without_npm_the_installer_says_what_to_install(tmp_path):
    prefix = installed_prefix(tmp_path / "cli", pins="@openai/codex@0.1.0")  # stale pins: an install is due
    done = run_script(prefix, tmp_path / "bin")
    assert done.returncode == 1
    assert "'node' is not on PATH" in done.stderr and "install Node.js >= 20 with npm" in done.stderr
    assert (prefix / ".pins").read_text().strip() == "@openai/codex@0.1.0"  # left as it was


def test_a_failing_npm_is_reported_with_its_last_lines_and_leaves_no_prefix(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "node", "exit 0")
    fake(bin_dir, "npm", "echo 'npm error code E404' >&2\n"
                         "echo 'npm error 404 Not Found - GET https://registry.example/x' >&2\nexit 1")
    done = run_script(tmp_path / "cli", bin_dir)
    assert done.returncode == 1
    assert "npm failed (exit 1)" in done.stderr and "npm error 404 Not Found" in done.stderr
    assert "npm config get registry" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["bin"]  # no half-installed prefix left behind


def test_a_hanging_npm_is_stopped_at_the_timeout(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "node", "exit 0")
    fake(bin_dir, "npm", "exec sleep 60")
    started = time.monotonic()
    done = run_script(tmp_path / "cli", bin_dir, CLI_AGENTS_TIMEOUT_S="1")
    assert done.returncode == 1
    assert "npm did not finish within 1s (CLI_AGENTS_TIMEOUT_S)" in done.stderr
    assert time.monotonic() - started < 20
    assert sorted(os.listdir(tmp_path)) == ["bin"]
