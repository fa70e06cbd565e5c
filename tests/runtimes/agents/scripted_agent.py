"""A scripted agent for runtime conformance: `payload["mode"]` picks ok / stream / raise / sleep.

Served by the local runtime (its own process) and, in-process, behind the AgentCore data-plane
stub; `rollout_entrypoint` lets the same code answer inline or write its result to S3.
"""

import threading
import time

from bedrock_agentcore import BedrockAgentCoreApp

from agentcore_rl_harness.agent import rollout_entrypoint

app = BedrockAgentCoreApp()
calls: dict[str, int] = {}  # session id -> handler runs (read by in-process tests)
_calls_lock = threading.Lock()


@rollout_entrypoint(app)
def invoke(payload, context):
    with _calls_lock:
        calls[context.session_id] = calls.get(context.session_id, 0) + 1
    mode = payload.get("mode", "ok")
    if mode == "raise":
        raise ValueError(f"scripted failure for x={payload.get('x')}")
    if mode == "sleep":
        time.sleep(payload["sleep_s"])
    if mode == "stream":
        return _stream(payload["x"])
    return {"answer": payload["x"] * 2, "session_id": context.session_id}


def _stream(x):
    for step in range(3):
        yield {"step": step}
    yield {"answer": x * 2}
