"""Codex CLI and Claude Code, unchanged, as an agent's model loop: the real CLI process, its model
pointed at the session's gateway on the CLI's own wire.

- Codex CLI (`@openai/codex`) speaks the OpenAI Responses API: a custom model provider
  (`model_providers.arl`, `wire_api="responses"`) at `_rollout.base_url`, the session key in the
  environment variable it names. Its shell tool is `exec_command`.
- Claude Code (`@anthropic-ai/claude-code`) speaks the Anthropic Messages API:
  `ANTHROPIC_BASE_URL` (the base URL without `/v1`) and `ANTHROPIC_API_KEY`. Its shell tool is
  `Bash`, allowed with `--allowedTools Bash` (it refuses `--dangerously-skip-permissions` as root).

Both are npm packages, pinned in `NPM_PACKAGES` and installed by `scripts/cli-agents` into one npm
prefix: `$AGENTCORE_RL_CLI_AGENTS`, else `~/.cache/agentcore-rl/cli-agents`. A bubblewrap session
hides the harness user's home, so a run binds the prefix in (`runtime.readable_paths`) and passes
the variable through (`runtime.env_passthrough`), as it does `AGENTCORE_RL_CLI_CONTEXT_WINDOW`
when set; see docs/agents.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import MissingDependencyError

CLIS = ("codex", "claude")
NPM_PACKAGES = {"codex": "@openai/codex@0.171.0", "claude": "@anthropic-ai/claude-code@2.1.332"}
PREFIX_ENV = "AGENTCORE_RL_CLI_AGENTS"
# The served model's context in tokens, told to the CLI so it compacts its history before the
# gateway refuses a prompt: Codex's `model_context_window`, Claude Code's
# CLAUDE_CODE_AUTO_COMPACT_WINDOW (which it raises to its minimum of 100k).
CONTEXT_WINDOW_ENV = "AGENTCORE_RL_CLI_CONTEXT_WINDOW"
SHELL_TOOLS = {"codex": "exec_command", "claude": "Bash"}  # each CLI's tool that runs a command
# Codex features off: those whose tools are not plain functions (the gateway takes function tools
# only), and `plugins`, whose start-up sync downloads a plugin catalogue from GitHub.
CODEX_OFF = ("multi_agent", "image_generation", "apps", "browser_use", "in_app_browser", "tool_suggest",
             "skill_search", "plugins")
# Claude Code's calls home (telemetry, update checks): a session reaches only the gateway anyway.
CLAUDE_QUIET = {"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1"}


@dataclass(frozen=True)
class CliCommand:
    """A CLI's argv and the environment variables it needs on top of the caller's."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CliRun:
    """What a CLI run left: its exit code and the tails of its output."""

    cli: str
    exit_code: int
    stdout: str
    stderr: str


def cli_prefix() -> Path:
    """Where `scripts/cli-agents` installs the CLIs: `$AGENTCORE_RL_CLI_AGENTS`, else the cache."""
    named = os.environ.get(PREFIX_ENV)
    return Path(named) if named else Path.home() / ".cache" / "agentcore-rl" / "cli-agents"


def context_window() -> int | None:
    """`$AGENTCORE_RL_CLI_CONTEXT_WINDOW` as a number of tokens, or None when unset."""
    named = os.environ.get(CONTEXT_WINDOW_ENV, "").strip()
    if not named:
        return None
    if not named.isdigit() or int(named) < 1:
        raise ValueError(f"{CONTEXT_WINDOW_ENV}={named!r} is not a number of tokens; set it to the served "
                         "model's context (sampler.vllm.max_model_len), e.g. 40960, or unset it")
    return int(named)


def cli_binary(cli: str, prefix: Path | None = None) -> Path:
    """The installed CLI's executable; MissingDependencyError naming how to install it."""
    if cli not in CLIS:
        raise ValueError(f"unknown CLI agent {cli!r}; choose one of {list(CLIS)}")
    prefix = cli_prefix() if prefix is None else prefix
    binary = prefix / "node_modules" / ".bin" / cli
    if not os.access(binary, os.X_OK):
        raise MissingDependencyError(
            f"{NPM_PACKAGES[cli]} is not installed at {binary}: run `bash scripts/cli-agents {prefix}` "
            f"(or `bash scripts/setup test`); inside a session, bind the prefix in with "
            f"runtime.readable_paths=[{prefix}] and set {PREFIX_ENV}={prefix} with "
            f"runtime.env_passthrough=[{PREFIX_ENV}] (the session's HOME is its own folder)")
    return binary


def cli_command(cli: str, *, prompt: str, base_url: str, api_key: str, model_id: str,
                prefix: Path | None = None, window: int | None = None) -> CliCommand:
    """The non-interactive run of `cli` on `prompt`, its model at the gateway `base_url` (`.../v1`)
    as the session `api_key`; its shell commands run without asking. `window`: the model's context
    in tokens (None: the CLI's own guess for an unknown model)."""
    binary = str(cli_binary(cli, prefix))
    if cli == "codex":
        config = [arg for feature in CODEX_OFF for arg in ("-c", f"features.{feature}=false")]
        if window is not None:
            config += ["-c", f"model_context_window={window}"]
        # analytics off: at exit Codex otherwise waits ~5 s on its analytics upload in a session that
        # reaches only the gateway
        config += ["-c", "analytics.enabled=false", "-c", 'web_search="disabled"', "-c", 'model_provider="arl"', "-c",
                   f'model_providers.arl={{name="arl", base_url="{base_url}", env_key="ARL_API_KEY", '
                   'wire_api="responses"}']
        return CliCommand((binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                           *config, "-m", model_id, prompt), {"ARL_API_KEY": api_key})
    env = {"ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"), "ANTHROPIC_API_KEY": api_key, **CLAUDE_QUIET}
    if window is not None:
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(window)
    return CliCommand((binary, "-p", prompt, "--model", model_id, "--allowedTools", "Bash"), env)


def run_cli(cli: str, *, prompt: str, base_url: str, api_key: str, model_id: str, cwd: Path,
            timeout_s: float = 1800, home: Path | None = None, prefix: Path | None = None,
            tail_chars: int = 4000) -> CliRun:
    """Run `cli` on `prompt` in `cwd` until it exits (its own end, or `timeout_s`: TimeoutExpired).
    `home`: its HOME (and CODEX_HOME), where it keeps its settings and session files. The model's
    context comes from `$AGENTCORE_RL_CLI_CONTEXT_WINDOW` (`context_window`)."""
    command = cli_command(cli, prompt=prompt, base_url=base_url, api_key=api_key, model_id=model_id,
                          prefix=prefix, window=context_window())
    env = {**os.environ, **command.env}
    if home is not None:
        env.update(HOME=str(home), CODEX_HOME=str(home / ".codex"))
        (home / ".codex").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command.argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)
    return CliRun(cli=cli, exit_code=done.returncode, stdout=done.stdout[-tail_chars:],
                  stderr=done.stderr[-tail_chars:])
