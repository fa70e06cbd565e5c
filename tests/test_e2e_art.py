"""agentcore-rl-toolkit 0.2.0 agents, unchanged, through the real plugin on the local runtime:
the tiny model behind the gateway, `reward_from_agent`, and the agent's own reward recorded."""

import json

import pytest

pytest.importorskip("agentcore_rl_toolkit", reason="pip install --no-deps agentcore-rl-toolkit==0.2.0")
pytestmark = pytest.mark.slow

RL_AGENT = '''
import openai
from agentcore_rl_toolkit import AgentCoreRLApp

app = AgentCoreRLApp()

@app.rollout_entrypoint
def invoke_agent(payload: dict):
    rollout = payload["_rollout"]
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    reply = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": payload["prompt"]}])
    return {"text": reply.choices[0].message.content, "rewards": [float(payload["n"] % 2 == 0)]}
'''

RUNTIME_AGENT = '''
import openai
from agentcore_rl_toolkit import AgentCoreRuntimeApp

app = AgentCoreRuntimeApp()

@app.entrypoint
def invoke_agent(payload: dict):
    rollout = payload["_rollout"]
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    reply = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": payload["prompt"]}])
    return {"n": payload["n"], "rewards": {"self": 1.0}}
'''

TASKS = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="rl_agent.py", samples=2, reward_from_agent=True)
def test_rl(rollout, row):
    assert rollout.reward == 1.0

@arl.reward
def even(rollout, row):
    return float(rollout.result["n"] % 2 == 0)

@arl.task(dataset="data.jsonl", agent="runtime_agent.py", rewards=[even])
def test_runtime(rollout, row):
    assert rollout.reward == 1.0
'''


def _project(pytester, rows):
    pytester.path.joinpath("data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pytester.path.joinpath("rl_agent.py").write_text(RL_AGENT)
    pytester.path.joinpath("runtime_agent.py").write_text(RUNTIME_AGENT)
    pytester.makepyfile(test_tasks=TASKS)


def _run(pytester, out, *extra):
    return pytester.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set",
        "sampling.max_tokens=4", "--agentcore-rl-out", out, *extra, timeout=600,
    )


def _records(pytester, out):
    lines = (pytester.path / out / "rollouts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_art_agents_with_s3_results_on_the_local_runtime(pytester, tiny_model_dir):
    _project(pytester, [{"id": f"q{n}", "split": "test", "n": n, "prompt": f"Say {n}"} for n in range(3)])
    result = _run(pytester, "run", "--agentcore-rl-set", "runtime.result_mode=s3")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=6, failed=3)  # q1 fails in both tasks (odd), by their rewards
    records = _records(pytester, "run")
    assert len(records) == 9 and all(r["status"] in ("completed", "task_failed") for r in records)
    for record in records:
        n = int(record["row_id"][1:])
        assert record["traces"] and sum(record["traces"][0]["loss_mask"]) >= 1  # the agent's tokens
        if record["task"] == "test_rl":  # the reward the RL app saved to (local) S3 is the reward
            assert record["reward"] == float(n % 2 == 0)
            assert record["rewards"] == {"agent": float(n % 2 == 0)}
            assert record["result"]["rewards"] == [float(n % 2 == 0)]
        else:  # the task computes its own; the agent's self-score is still recorded
            assert record["reward"] == float(n % 2 == 0)
            assert record["rewards"] == {"even": float(n % 2 == 0), "agent.self": 1.0, "agent": 1.0}


def test_art_rl_app_inline_on_the_local_runtime_is_an_agent_error_naming_the_fix(pytester, tiny_model_dir):
    """The default result mode: no S3 triple is sent, so ART's app does not answer 500; it
    answers "processing" and saves its result only to S3, which inline mode never reads: the
    rollout is an agent_error that says which setting works, not a silent empty result."""
    _project(pytester, [{"id": "q0", "split": "test", "n": 0, "prompt": "Say 0"}])
    result = _run(pytester, "inline", "-k", "test_rl", "--agentcore-rl-set", "eval.samples=1")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*agent_error: the agent answered {'status': 'processing'} at once*"])
    [record] = _records(pytester, "inline")
    assert record["status"] == "agent_error", record
    assert "Use --agentcore-rl-set runtime.result_mode=s3 (the local runtime receives it" in record["error"]
