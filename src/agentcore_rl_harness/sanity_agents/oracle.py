"""The oracle agent: returns the reference result the harness put in `_rollout["oracle_result"]`."""

from __future__ import annotations

from typing import Any

from bedrock_agentcore import BedrockAgentCoreApp

from . import ORACLE_KEY

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    result = (payload.get("_rollout") or {}).get(ORACLE_KEY)
    if not isinstance(result, dict):
        raise ValueError(
            f"the oracle agent needs payload['_rollout'][{ORACLE_KEY!r}] (a dict), which the harness "
            "adds under --agentcore-rl-set agent=oracle; got "
            f"{type(result).__name__}"
        )
    return result
