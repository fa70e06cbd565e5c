import time

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    start = time.time()
    time.sleep(payload.get("sleep_s", 0.5))
    return {"start": start, "end": time.time()}
