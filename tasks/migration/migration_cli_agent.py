"""Codex CLI or Claude Code, unchanged, as the migration pack's agent (`codex_agent.py`,
`claude_code_agent.py` each serve one): the app lays the row's project out in its session, runs
the real CLI there on the row's instruction with its model pointed at the session's gateway
(`agentcore_rl_harness.cli_agents`), and returns the CLI's exit code, its answer and the files it
changed. The CLI's own prompts, tools and loop are untouched; its shell tool's commands run in the
session's sandbox, where the pack's rewards then check the project.
"""

from __future__ import annotations

import os
from pathlib import Path

from bedrock_agentcore import BedrockAgentCoreApp

from agentcore_rl_harness.agent import rollout_config
from agentcore_rl_harness.cli_agents import run_cli

PROJECT_DIR = "project"
CLI_TIMEOUT_S = 3600  # a CLI's episode on a loaded CPU can take long; the rollout timeout bounds it


def cli_app(cli: str) -> BedrockAgentCoreApp:
    """An ACR app whose every invocation is one run of `cli` on the row's project."""
    app = BedrockAgentCoreApp()

    @app.entrypoint
    def invoke(payload):
        rollout = rollout_config(payload)
        root = Path(os.getcwd()) / PROJECT_DIR
        for relative, text in payload["files"].items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        before = {path: path.read_text() for path in root.rglob("*.py")}
        run = run_cli(cli, prompt=payload["instruction"], base_url=rollout.base_url, api_key=rollout.api_key,
                      model_id=rollout.model_id, cwd=root, timeout_s=CLI_TIMEOUT_S)
        changed = sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                         if before.get(path) != path.read_text())
        return {"cli": cli, "exit_code": run.exit_code, "answer": run.stdout.strip()[-2000:],
                "stderr": run.stderr[-2000:] if run.exit_code else "", "changed_files": changed}

    return app
