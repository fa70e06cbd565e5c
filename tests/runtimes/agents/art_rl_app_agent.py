"""A real agentcore-rl-toolkit 0.2.0 `AgentCoreRLApp` agent, written as ART documents it.

`@app.rollout_entrypoint` answers `{"status": "processing"}` at once, runs the handler in the
background and saves the returned dict to S3 when `_rollout` has `exp_id`, `input_id` and
`s3_bucket`. The handler reads `_rollout` itself and scores itself (`rewards`, `reward`).
"""

import openai
from agentcore_rl_toolkit import AgentCoreRLApp

app = AgentCoreRLApp()


@app.rollout_entrypoint
def invoke_agent(payload: dict):
    rollout = payload["_rollout"]
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    response = client.chat.completions.create(
        model=rollout["model_id"],
        messages=[{"role": "user", "content": payload["prompt"]}],
        max_tokens=rollout.get("sampling_params", {}).get("max_tokens", 16),
    )
    text = response.choices[0].message.content or ""
    answer = text.split("####")[-1].strip()
    correct = float(answer == payload["answer"])
    return {"rollout_data": [{"text": text}], "rewards": [correct], "reward": correct, "answer": answer}
