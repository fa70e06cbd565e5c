from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    if payload.get("while_streaming"):
        return _stream()
    raise ValueError("the tool broke: no such city 'Atlantis'")


def _stream():
    yield {"partial": 1}
    raise RuntimeError("stream broke")
