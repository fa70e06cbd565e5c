"""Fails to import while the file named by `ARL_TEST_BROKEN_MARKER` exists."""

import os

from bedrock_agentcore import BedrockAgentCoreApp

if os.path.exists(os.environ["ARL_TEST_BROKEN_MARKER"]):
    raise RuntimeError("the agent's config service is down")

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    return {"ok": True}
