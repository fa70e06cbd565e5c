"""Codex CLI and Claude Code (npm, unchanged; installed by scripts/cli-agents) as a migration task's
agent: the real CLI process runs in the isolated session against the real gateway on its own wire
(Responses / Anthropic Messages); the model's replies are scripted: one call of the CLI's shell
tool writing the oracle migration, then an answer. The command runs in the session's sandbox,
the pack's rewards see the migrated project, and the one trace is exact: its sampled tokens are
the scripted replies and carry the loss mask, nothing else does. Where the CLIs are not installed
(`bash scripts/setup test` installs them) these tests skip, except under CI, where they fail."""

from __future__ import annotations

import os

import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.cli_agents import PREFIX_ENV, SHELL_TOOLS, cli_binary, cli_prefix
from agentcore_rl_harness.errors import MissingDependencyError
from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from migration_harness import PACK, hermes_text, play

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]
AGENTS = {"codex": ("codex_agent.py", "/v1/responses"), "claude": ("claude_code_agent.py", "/v1/messages")}
ANSWER = "Migrated the deprecated calls; the tests pass."


def installed_prefix(cli: str):
    """The CLIs' prefix; a missing CLI skips the test here and fails it under CI."""
    prefix = cli_prefix()
    try:
        cli_binary(cli, prefix)
    except MissingDependencyError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the CLI agents: {exc}")
        pytest.skip(str(exc))
    return prefix


def write_migration(cli: str, row: dict) -> dict:
    """The oracle migration as one call of the CLI's shell tool (heredoc writes of each target)."""
    command = "\n".join(f"cat > {target['path']} <<'MIGRATED_EOF'\n{row['migrated'][target['path']]}MIGRATED_EOF"
                        for target in row["targets"])
    arguments = {"cmd": command} if cli == "codex" else {"command": command, "description": "write the migration"}
    return {"tool_calls": [{"name": SHELL_TOOLS[cli], "arguments": arguments}]}


@pytest.mark.parametrize("cli", sorted(AGENTS))
async def test_cli_agent_migrates_the_project_through_the_gateway(cli, pack_rows, tasks, renderer, monkeypatch):
    prefix = installed_prefix(cli)
    monkeypatch.setenv(PREFIX_ENV, str(prefix))
    agent_file, wire = AGENTS[cli]

    @arl.task(dataset=str(PACK / "data" / "level1.jsonl"), **{**tasks.TASK, "agent": str(PACK / agent_file)})
    def test_migration_cli(rollout, row):
        pass

    row = pack_rows[1][-1]
    replies = [hermes_text(write_migration(cli, row)), ANSWER]
    paths: list[str] = []
    runtime = LocalRuntimeConfig(concurrency=1, startup_timeout_s=60, readable_paths=(str(prefix),),
                                 env_passthrough=(PREFIX_ENV,))
    played = await play(test_migration_cli, row, replies, renderer, runtime_config=runtime, paths=paths,
                        timeout_s=120)
    assert played.handle.status.value == "completed", played.handle.error
    result = played.handle.result
    assert result["exit_code"] == 0, result
    assert result["changed_files"] == sorted(t["path"] for t in row["targets"])
    assert ANSWER in result["answer"]
    assert played.rewards == {"files_migrated": 1.0, "tests_pass": 1.0}
    # Its own wire only, and every request a model call: none refused (Claude Code sends a
    # `system`-role message inside `messages`, which the gateway takes as a system turn; it was
    # a 400, and the CLI resent the request with that text in the user's turn)
    assert [path for path in paths if path.startswith("/v1/")] == [wire] * len(replies)
    assert len(played.sampler.calls) == len(replies)
    (trace,) = played.episode.traces  # one linear conversation
    prompt = renderer.decode(trace.token_ids[:trace.prompt_length])
    assert f'"name": "{SHELL_TOOLS[cli]}"' in prompt  # the CLI's own tools, offered by the CLI
    completion = trace.token_ids[trace.prompt_length:]
    sampled = [token for token, mask in zip(completion, trace.loss_mask) if mask]
    assert sampled == [token for text in replies for token in [*renderer.encode(text), renderer.stop_token_ids[0]]]
    assert all(logprob is not None for logprob, mask in zip(trace.logprobs, trace.loss_mask) if mask)
    unmasked = renderer.decode([token for token, mask in zip(completion, trace.loss_mask) if not mask])
    assert "MIGRATED_EOF" not in unmasked  # the tool call is trained; the tool's result is not


async def test_a_cli_the_session_cannot_see_is_an_agent_error_that_says_why(pack_rows, tasks, renderer, monkeypatch):
    """The prefix passed through but not bound in (no runtime.readable_paths): bubblewrap hides
    the harness user's home, so the app cannot find the CLI and says how to fix it."""
    prefix = installed_prefix("codex")
    monkeypatch.setenv(PREFIX_ENV, str(prefix))

    @arl.task(dataset=str(PACK / "data" / "level1.jsonl"), **{**tasks.TASK, "agent": str(PACK / "codex_agent.py")})
    def test_migration_cli(rollout, row):
        pass

    runtime = LocalRuntimeConfig(concurrency=1, startup_timeout_s=60, env_passthrough=(PREFIX_ENV,))
    played = await play(test_migration_cli, pack_rows[1][-1], [], renderer, runtime_config=runtime, timeout_s=60)
    assert played.handle.status.value == "agent_error"
    assert "@openai/codex@0.171.0 is not installed" in played.handle.error
    assert f"runtime.readable_paths=[{prefix}]" in played.handle.error
    assert played.sampler.calls == []
