"""Echoes the payload plus what the agent process can see (cwd, env, session id)."""

import os

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload, context):
    return {
        "echo": payload,
        "session_id": context.session_id,
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "env": sorted(os.environ),
        "pid": os.getpid(),
        "ppid": os.getppid(),
    }
