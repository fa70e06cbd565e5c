"""The null agent: answers `{}` and never calls the model (a reward it earns is a gameable reward)."""

from __future__ import annotations

from typing import Any

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    return {}
