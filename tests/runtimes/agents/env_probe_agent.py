"""Reports what a session sees of its filesystem, and fetches the URL it is given (the gateway's
place in `_rollout.base_url`), so a test can tell which root the session runs in."""

import os
import shutil
import sys
import urllib.request

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()


def writable(path):
    try:
        with open(path, "w") as out:
            out.write("x")
        return True
    except OSError:
        return False


@app.entrypoint
def invoke(payload):
    with open("made-by-agent.txt", "w") as out:
        out.write("hello from the environment\n")
    with urllib.request.urlopen(payload["_rollout"]["base_url"] + "/probe", timeout=10) as response:
        fetched = response.read().decode()
    with open("/etc/os-release") as release:
        os_release = release.read()
    return {
        "python": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix,
        "pretty_name": next(line for line in os_release.splitlines() if line.startswith("PRETTY_NAME")),
        "javac": shutil.which("javac"), "java_options": os.environ.get("JAVA_TOOL_OPTIONS"),
        "host_paths": {path: os.path.exists(path) for path in payload["host_paths"]},
        "root_writable": writable("/probe-file"), "usr_writable": writable("/usr/probe-file"),
        "tmp_writable": writable("/tmp/probe-file"), "cwd": os.getcwd(), "fetched": fetched,
    }
