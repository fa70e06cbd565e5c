import os
import sys

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    print("about to crash", file=sys.stderr, flush=True)
    os._exit(7)
