"""A manual probe, not a test: Codex CLI or Claude Code, unchanged, against the real gateway with
scripted replies (issue #35 item 3; the CI test that runs them as task agents is still to come).

    npm install --prefix DIR @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.332
    PYTHONPATH=src HF_HUB_OFFLINE=1 python bench/cli_agent_probe.py codex DIR
    PYTHONPATH=src HF_HUB_OFFLINE=1 python bench/cli_agent_probe.py claude DIR

The model's first reply calls the CLI's shell tool (Codex: `exec_command` on the Responses wire;
Claude Code: `Bash` on the Anthropic Messages wire) to write a file, the second answers. Prints
the CLI's exit code, whether the file was written, and the session's trace (tokens, prompt
length, loss-masked tokens, the tool names the CLI offered). Run as a user other than root
(Claude Code refuses to skip permissions as root; `--allowedTools Bash` is used instead).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
from agentcore_rl_harness.gateway.server import GatewayServer
from agentcore_rl_harness.models import load_tokenizer
from agentcore_rl_harness.samplers.scripted import ScriptedSampler

# Codex features whose tools are not plain functions (the gateway takes function tools only).
CODEX_OFF = ("multi_agent", "image_generation", "apps", "browser_use", "in_app_browser", "tool_suggest",
             "skill_search")
CALLS = {
    "codex": '{"name": "exec_command", "arguments": {"cmd": "echo hi > made_by_cli.txt"}}',
    "claude": '{"name": "Bash", "arguments": {"command": "echo hi > made_by_cli.txt", "description": "write"}}',
}


def command(cli: str, prefix: Path, base_url: str, key: str, home: str) -> tuple[list[str], dict[str, str]]:
    binary = str(prefix / "node_modules" / ".bin" / cli)
    if cli == "codex":
        config = [arg for feature in CODEX_OFF for arg in ("-c", f"features.{feature}=false")]
        config += ["-c", 'web_search="disabled"', "-c", 'model_provider="arl"', "-c",
                   f'model_providers.arl={{name="arl", base_url="{base_url}", env_key="ARL_KEY", wire_api="responses"}}']
        return ([binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", *config,
                 "-m", "tiny", "write the file"], {"ARL_KEY": key, "CODEX_HOME": home})
    return ([binary, "-p", "write the file", "--model", "tiny", "--allowedTools", "Bash"],
            {"ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"), "ANTHROPIC_API_KEY": key, "HOME": home,
             "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"})


def main(cli: str, prefix: str) -> None:
    model_dir = Path.home() / ".cache" / "agentcore-rl" / "models" / "tiny"
    renderer = ChatTemplateRenderer(load_tokenizer(model_dir), chat_template=load_template())
    replies = [f"<tool_call>\n{CALLS[cli]}\n</tool_call>"] + ["Done."] * 4
    server = GatewayServer(sampler=ScriptedSampler(replies, encode=renderer.encode), renderer=renderer,
                           model_id="tiny").start()
    try:
        key = server.sessions.open()
        with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as home:
            argv, env = command(cli, Path(prefix), server.base_url, key, home)
            done = subprocess.run(argv, cwd=work, env={**os.environ, **env}, capture_output=True, text=True,
                                  timeout=300, stdin=subprocess.DEVNULL)
            print(f"{cli}: exit code {done.returncode}; file written: {(Path(work) / 'made_by_cli.txt').exists()}")
            print(done.stdout[-1000:], done.stderr[-1500:], sep="\n")
        for trace in server.sessions.finish(key).traces:
            offered = sorted(set(re.findall(r'"name": "(\w+)"', renderer.decode(trace.token_ids[:trace.prompt_length]))))
            print(f"trace: {len(trace.token_ids)} tokens, prompt {trace.prompt_length}, "
                  f"loss-masked {sum(trace.loss_mask)}; tools offered: {offered}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
