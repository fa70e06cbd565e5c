"""Accepts the S3 result contract but never writes a result (a lost rollout)."""

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    return {"status": "accepted"}
