"""An agent written in agentcore-rl-toolkit's documented style: it reads `_rollout` itself.

It builds its own OpenAI client from `payload["_rollout"]["base_url"]` / `["model_id"]` /
`["api_key"]` and returns `{"rollout_data", "rewards"}`; only the decorator is the harness's.
"""

import openai
from bedrock_agentcore import BedrockAgentCoreApp

from agentcore_rl_harness.agent import rollout_entrypoint

app = BedrockAgentCoreApp()


@rollout_entrypoint(app)
def invoke_agent(payload: dict):
    base_url = payload["_rollout"]["base_url"]
    model_id = payload["_rollout"]["model_id"]
    api_key = payload["_rollout"]["api_key"]
    params = payload["_rollout"].get("sampling_params", {})
    client = openai.OpenAI(base_url=base_url, api_key=api_key)
    response = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": payload["prompt"]}],
        max_tokens=params.get("max_tokens", 32),
    )
    text = response.choices[0].message.content
    answer = text.split("####")[-1].strip()
    return {
        "rollout_data": [{"text": text}],
        "rewards": [float(answer == payload["answer"])],
        "answer": answer,
    }
