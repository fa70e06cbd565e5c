"""Prints a lot to stdout at import and per request: must not block on a full pipe."""

from bedrock_agentcore import BedrockAgentCoreApp

print("x" * 200_000)
app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    print("y" * 200_000)
    return {"ok": True}
