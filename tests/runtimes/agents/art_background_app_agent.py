"""A real agentcore-rl-toolkit 0.2.0 `AgentCoreRuntimeApp(background=True)` agent: it answers
every payload with an invocation state at once and is read back with get invocations."""

import openai
from agentcore_rl_toolkit import AgentCoreRuntimeApp

app = AgentCoreRuntimeApp(background=True)  # plain payloads run in the background too


@app.entrypoint
def invoke_agent(payload: dict):
    rollout = payload["_rollout"]
    if payload.get("fail"):
        raise RuntimeError("runtime-app agent failed on purpose")
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    response = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": payload["prompt"]}],
        max_tokens=16,
    )
    text = response.choices[0].message.content or ""
    answer = text.split("####")[-1].strip()
    return {"answer": answer, "rewards": {"exact": float(answer == payload["answer"])}}
