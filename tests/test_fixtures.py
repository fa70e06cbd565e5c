"""`fixtures.py` through pytester: every fixture a task test can ask for, on a real run (tiny model)."""

import json

import pytest

pytestmark = pytest.mark.slow

AGENT = '''
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    reply = client.chat.completions.create(
        model=rollout["model_id"], messages=[{"role": "user", "content": payload["question"]}], max_tokens=4)
    return {"answer": payload["n"], "reply": reply.choices[0].message.content}
'''

TASKS = '''
import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.errors import HarnessError

@arl.task(dataset="data.jsonl", agent="agent.py")
def test_every_fixture(rollout, row, gateway, agentcore_session, backend, agentcore_rl_config):
    assert rollout.status.value == "completed" and rollout.result["answer"] == row["n"]
    assert rollout.turns == 1 and len(rollout.traces) == 1
    assert gateway.base_url.startswith("http://127.0.0.1:") and gateway.base_url.endswith("/v1")
    assert agentcore_rl_config.model.name == "tiny" and agentcore_rl_config.agent == "task"

    extra = agentcore_session.run({"n": 7, "question": "And 3 + 4?"})
    assert extra.status.value == "completed" and extra.result["answer"] == 7
    assert extra.session_id != rollout.session_id

    assert backend.model_name == "tiny" and backend.policy_version == 0
    completion = backend.sample([{"role": "user", "content": row["question"]}],
                                params=arl.SamplingParams(max_tokens=4, seed=1))
    assert 1 <= len(completion.token_ids) == len(completion.logprobs) <= 4
    assert completion.policy_version == 0 and isinstance(completion.text, str)
    rescored = backend.score(completion.prompt_token_ids, completion.token_ids)
    assert rescored.logprobs == pytest.approx(completion.logprobs, abs=1e-4)

    # a sanity check on the recorded trace: the policy gives its sampled tokens the same logprobs
    trace = rollout.traces[0]
    sampled = [i for i, mask in enumerate(trace.loss_mask) if mask]
    scored = backend.score(trace.token_ids[:trace.prompt_length], trace.token_ids[trace.prompt_length:])
    assert [scored.logprobs[i] for i in sampled] == pytest.approx([trace.logprobs[i] for i in sampled], abs=1e-4)


@arl.task(dataset="data.jsonl", agent="agent.py", name="test_async_backend")
async def test_async(rollout, backend):
    completion = await backend.asample([1, 2, 3], params=arl.SamplingParams(max_tokens=2))
    assert 1 <= len(completion.token_ids) <= 2
    assert (await backend.ascore([1, 2, 3], completion.token_ids)).total <= 0
    with pytest.raises(HarnessError, match="await backend.asample"):
        backend.sample([1, 2, 3])


def test_plain_test_gets_the_backend_and_config(backend, agentcore_rl_config):
    assert backend.model_name == agentcore_rl_config.model.name == "tiny"
'''


@pytest.fixture
def project(pytester):
    rows = [{"id": f"q{i}", "split": "test", "n": i, "question": f"What is {i} + 1?"} for i in range(2)]
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.path.joinpath("agent.py").write_text(AGENT)
    pytester.makepyfile(test_tasks=TASKS)
    return pytester


def test_every_fixture_is_usable_from_a_task_test(project, tiny_model_dir):
    result = project.runpytest_subprocess(
        "--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
        "--agentcore-rl-set", "sampling.max_tokens=8", "--agentcore-rl-out", "run", timeout=600,
    )
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.assert_outcomes(passed=5)  # 2 rows x 2 tasks + the plain test
    records = [json.loads(line) for line in (project.path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["row_id"]) for r in records) == [
        ("test_async_backend", "q0"), ("test_async_backend", "q1"),
        ("test_every_fixture", "q0"), ("test_every_fixture", "q1"),
    ]
    assert all(r["success"] for r in records)


def test_fixtures_skip_without_the_flag(project):
    result = project.runpytest_subprocess("-rs", "-k", "plain")
    result.assert_outcomes(skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*agentcore-rl fixture: run it with `pytest --agentcore-rl MODE`*"])
