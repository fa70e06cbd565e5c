"""Writes its pid (and the pid of a grandchild it spawns) to `payload["pid_file"]`, then hangs."""

import json
import signal
import subprocess
import sys
import time

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stubborn agent: only SIGKILL stops it


@app.entrypoint
def invoke(payload):
    import os

    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(payload["pid_file"], "w") as pid_file:
        json.dump({"pid": os.getpid(), "grandchild": grandchild.pid}, pid_file)
    time.sleep(60)
    return {"never": True}
