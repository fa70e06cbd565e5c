"""mini-swe-agent (PyPI `mini-swe-agent` 2.x), run unchanged as the migration pack's agent.

Its own `DefaultAgent` with its packaged `default.yaml` prompts, its `LitellmModel` (OpenAI
chat completions with its one `bash` tool) pointed at the session's gateway (`_rollout.base_url`,
the session key as `api_key`), and its `LocalEnvironment` running each command in the session's
project directory, where this app first lays the row's project out. It stops when the model runs
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, or at `step_limit` model calls.
"""

import os

# No network at run time: litellm's bundled model-cost map, and no cost lookup for the gateway's model.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")

from pathlib import Path  # noqa: E402

import yaml  # noqa: E402
from bedrock_agentcore import BedrockAgentCoreApp  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

app = BedrockAgentCoreApp()

PROJECT_DIR = "project"
STEP_LIMIT = 16
MAX_TOKENS = 1024


@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    root = Path(os.getcwd()) / PROJECT_DIR
    for relative, text in payload["files"].items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    before = {path: path.read_text() for path in root.rglob("*.py")}
    config = yaml.safe_load(get_config_path("default.yaml").read_text())
    model = LitellmModel(**{**config.get("model", {}), "model_name": f"openai/{rollout['model_id']}",
                            "cost_tracking": "ignore_errors",
                            "model_kwargs": {**config["model"].get("model_kwargs", {}), "api_base": rollout["base_url"], "api_key": rollout["api_key"],
                                             "max_tokens": MAX_TOKENS, "num_retries": 0}})
    environment = LocalEnvironment(**{**config.get("environment", {}), "cwd": str(root)})
    agent = DefaultAgent(model, environment, **{**config["agent"], "step_limit": STEP_LIMIT, "cost_limit": 0})
    outcome = agent.run(payload["instruction"])
    changed = sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                     if before.get(path) != path.read_text())
    return {"exit_status": outcome.get("exit_status"), "changed_files": changed, "model_calls": agent.n_calls,
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in agent.messages if m.get("role") == "assistant")}


if __name__ == "__main__":
    app.run()
