"""The office pack end to end: the real LangGraph agent in isolated local sessions, the real
gateway, its recorded traces, the session's final files read back through the sandbox.

The model is `ScriptedSampler` playing each row's `_script` oracle (rendered with the tiny
model's chat template), so every reward is shown reachable through the agent itself; a script
that loops or writes a malformed tool call shows LangGraph's failure modes recorded as the
agent's failure with its traces. The null and spam agents run through pytest on a few rows.
"""

from __future__ import annotations

import json

import pytest
from office_pack import rows, run_cases

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
from agentcore_rl_harness.records import Status

pytestmark = pytest.mark.slow

CALL_LS = {"tool_calls": [{"name": "ls", "arguments": {"path": "."}}]}


def one_row_per_template():
    chosen = {}
    for level in (1, 2, 3):
        for row in rows(level):
            if row["split"] == "test":
                chosen.setdefault(row["template"], row)
    return list(chosen.values())


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return ChatTemplateRenderer(load_tokenizer(tiny_model_dir))


def test_every_templates_script_reaches_reward_1_through_the_real_agent(renderer):
    chosen = one_row_per_template()
    assert len(chosen) == 10
    for rollout, episode in run_cases(renderer, [(row, row["script"]) for row in chosen]):
        assert rollout.status is Status.COMPLETED, rollout.error
        assert rollout.reward == 1.0 and rollout.success, (rollout.row_id, rollout.error)
        assert rollout.rewards["checks"] == 1.0 and rollout.rewards["guards"] == 1.0
        row = next(r for r in chosen if r["id"] == rollout.row_id)
        scripted_calls = [c["name"] for turn in row["script"] for c in turn.get("tool_calls", [])]
        assert rollout.result["tool_calls"] == scripted_calls and rollout.result["stopped"] is None
        assert rollout.turns == len(row["script"])  # one model call per scripted turn
        (trace,) = rollout.traces  # a clean multi-turn history: one exact token sequence
        assert sum(trace.loss_mask) > 0 and len(trace.logprobs) == len(trace.token_ids) - trace.prompt_length


def test_langgraphs_failure_modes_are_the_agents_failure_with_its_traces(renderer):
    base = rows(1)[0]
    looping = dict(base, id="loop", task="LOOP " + base["task"])
    malformed = dict(base, id="malformed", task="MALFORMED " + base["task"])
    broken = {"content": '<tool_call>\n{"name": "ls", "arguments": {"path": \n</tool_call>'}
    results = run_cases(renderer, [(looping, lambda index: CALL_LS), (malformed, [broken])])
    by_id = {rollout.row_id: rollout for rollout, _ in results}
    loop, bad = by_id["loop"], by_id["malformed"]
    assert loop.status is Status.TASK_FAILED and loop.result["stopped"] == "recursion_limit"
    assert loop.turns == 8 and loop.result["tool_calls"] == ["ls"] * 8  # recursion_limit 16 = 8 rounds
    assert loop.reward == 0.0 and loop.traces and sum(loop.traces[0].loss_mask) > 0
    assert bad.status is Status.TASK_FAILED and bad.result["stopped"] == "malformed_tool_call"
    assert bad.turns == 1 and bad.traces[0].metadata["ill_formed"] == 1
    assert bad.reward == 0.0


def test_a_rows_budget_of_model_calls_stops_a_wandering_episode(renderer):
    base = rows("1m")[0]
    assert base["max_model_calls"] == 5
    looping = dict(base, id="loop-1m", task="LOOP " + base["task"])
    (rollout, _), = run_cases(renderer, [(looping, lambda index: CALL_LS)])
    assert rollout.status is Status.TASK_FAILED and rollout.result["stopped"] == "recursion_limit"
    assert rollout.turns == 5 and rollout.result["tool_calls"] == ["ls"] * 5
    assert rollout.reward == 0.0 and sum(rollout.traces[0].loss_mask) > 0


def test_level_1m_rewards_success_alone_and_records_the_partial_credit(renderer):
    def wrong_code_case(row, name):  # the right person, the wrong code: half the checks
        target = row["guards"]["recipients"][0]
        send = {"tool_calls": [{"name": "send_email", "arguments": {
            "to": target, "subject": "Code", "body": "The code is 1234."}}]}
        return dict(row, id=name, task=f"{name} {row['task']}"), [*row["script"][:2], send, {"content": "Done."}]

    lift, level1 = rows("1m")[0], rows(1)[0]
    assert level1["template"] == lift["template"] == "mail_forward"
    right = dict(lift, id="right-1m", task=f"right-1m {lift['task']}")  # no task inside another's
    cases = [wrong_code_case(lift, "half-1m"), wrong_code_case(level1, "half-1"), (right, lift["script"])]
    by_id = {rollout.row_id: rollout for rollout, _ in run_cases(renderer, cases)}
    assert by_id["half-1m"].reward == 0.0 and by_id["half-1m"].success is False
    assert by_id["half-1m"].rewards == {"checks": 0.5, "guards": 1.0}  # recorded, not trained on
    assert by_id["half-1"].reward == 0.5 and by_id["half-1"].rewards["checks"] == 0.5  # levels 1-3
    assert by_id["right-1m"].reward == 1.0 and by_id["right-1m"].success is True


def test_the_null_agent_scores_zero(renderer):
    chosen = [rows(level)[0] for level in (1, 2, 3)]
    for rollout, _ in run_cases(renderer, [(row, []) for row in chosen], "agent=null"):
        assert rollout.status is Status.TASK_FAILED and rollout.reward == 0.0 and rollout.success is False
        assert rollout.rewards == {"checks": 0.0, "guards": 0.0} and rollout.turns == 0


def test_the_spam_agent_scores_zero_through_pytest(pytester, tiny_model_dir):
    from office_pack import PACK

    out = pytester.path / "run"
    result = pytester.runpytest_subprocess(
        str(PACK), "-p", "no:cacheprovider", "--agentcore-rl", "eval",
        "-k", "not mcp", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "agent=spam",
        "--agentcore-rl-set", "eval.max_rows=1", "--agentcore-rl-set", "eval.samples=1",
        "--agentcore-rl-out", str(out), timeout=600,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(failed=4)
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert {r["task"] for r in records} == {f"test_office_level{level}" for level in (1, 2, 3, "1m")}
    for record in records:
        assert record["status"] == "task_failed" and record["reward"] == 0.0 and record["success"] is False
        # it claimed success and a reward: kept as the agent's own, never the task's
        assert record["rewards"]["agent"] == 1.0 and record["rewards"]["checks"] == 0.0
