"""Codex CLI (npm `@openai/codex`, Responses wire), unchanged, as the migration pack's agent:
see migration_cli_agent.py and docs/agents.md."""

from migration_cli_agent import cli_app

app = cli_app("codex")

if __name__ == "__main__":
    app.run()
