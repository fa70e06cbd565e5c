"""Draws random numbers at import (shared by forked sessions) and per request (must differ).

If `ARL_TEST_IMPORT_LOG` names a file, each import of this module appends a line to it.
"""

import os
import random

import numpy
from bedrock_agentcore import BedrockAgentCoreApp

if "ARL_TEST_IMPORT_LOG" in os.environ:
    with open(os.environ["ARL_TEST_IMPORT_LOG"], "a") as import_log:
        import_log.write(f"{os.getpid()}\n")

AT_IMPORT = random.random()
numpy.random.random()  # numpy's global RNG is now in use, and copied into every fork

app = BedrockAgentCoreApp()


@app.entrypoint
def invoke(payload):
    return {
        "at_import": AT_IMPORT,
        "random": random.random(),
        "numpy": float(numpy.random.random()),
        "pid": os.getpid(),
    }
