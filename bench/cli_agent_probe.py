"""A manual probe: Codex CLI or Claude Code, unchanged, against the real gateway with scripted
replies, on this machine's host (no session sandbox). The CI test that runs them as task agents in
the session sandbox is tests/tasks_migration/test_migration_cli_agents.py; both build the CLI's
command with agentcore_rl_harness.cli_agents.

    bash scripts/cli-agents          # or: npm install --prefix DIR @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.332
    PYTHONPATH=src HF_HUB_OFFLINE=1 python bench/cli_agent_probe.py codex [DIR]
    PYTHONPATH=src HF_HUB_OFFLINE=1 python bench/cli_agent_probe.py claude [DIR]

The model's first reply calls the CLI's shell tool (Codex: `exec_command` on the Responses wire;
Claude Code: `Bash` on the Anthropic Messages wire) to write a file, the second answers. Prints
the CLI's exit code, whether the file was written, and the session's trace (tokens, prompt
length, loss-masked tokens, the tool names the CLI offered).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from agentcore_rl_harness.cli_agents import SHELL_TOOLS, run_cli
from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
from agentcore_rl_harness.gateway.server import GatewayServer
from agentcore_rl_harness.models import load_tokenizer
from agentcore_rl_harness.samplers.scripted import ScriptedSampler

COMMAND = "echo hi > made_by_cli.txt"


def main(cli: str, prefix: str | None = None) -> None:
    model_dir = Path.home() / ".cache" / "agentcore-rl" / "models" / "tiny"
    renderer = ChatTemplateRenderer(load_tokenizer(model_dir), chat_template=load_template())
    arguments = {"cmd": COMMAND} if cli == "codex" else {"command": COMMAND, "description": "write"}
    call = json.dumps({"name": SHELL_TOOLS[cli], "arguments": arguments})
    replies = [f"<tool_call>\n{call}\n</tool_call>"] + ["Done."] * 4
    server = GatewayServer(sampler=ScriptedSampler(replies, encode=renderer.encode), renderer=renderer,
                           model_id="tiny").start()
    try:
        key = server.sessions.open()
        with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as home:
            run = run_cli(cli, prompt="write the file", base_url=server.base_url, api_key=key, model_id="tiny",
                          cwd=Path(work), home=Path(home), timeout_s=300,
                          prefix=Path(prefix) if prefix else None)
            print(f"{cli}: exit code {run.exit_code}; file written: {(Path(work) / 'made_by_cli.txt').exists()}")
            print(run.stdout[-1000:], run.stderr[-1500:], sep="\n")
        for trace in server.sessions.finish(key).traces:
            offered = sorted(set(re.findall(r'"name": "(\w+)"', renderer.decode(trace.token_ids[:trace.prompt_length]))))
            print(f"trace: {len(trace.token_ids)} tokens, prompt {trace.prompt_length}, "
                  f"loss-masked {sum(trace.loss_mask)}; tools offered: {offered}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
