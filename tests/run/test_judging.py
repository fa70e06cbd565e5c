"""Judged rewards in whole runs over the fakes (ScriptedSampler, FakeRuntime): a scripted judge on
loopback (the real `openai` client) or the policy's own sampler; judge_error is counted, never a
0; a group is judged in one call; rescore reuses the cache; judge calls never enter traces."""

import json

import pytest
from judge_server import ScriptedJudgeServer
from run_driver import drive_items
from run_fakes import FAST, make_spec

import agentcore_rl_harness as arl
from agentcore_rl_harness.judges.protocol import POINTWISE_SYSTEM
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.run.rescore import rescore
from agentcore_rl_harness.tasks import task_spec

RUBRIC = "1 if the agent's reply is 4, else 0"


def _judge_config(server, monkeypatch, *more):
    monkeypatch.setenv("ARL_TEST_JUDGE_KEY", "sk-loopback")
    return ["roles.judge.kind=openai", "roles.judge.model=judge-test", f"roles.judge.base_url={server.base_url}",
            "roles.judge.api_key_env=ARL_TEST_JUDGE_KEY", *more]


def _eval(tmp_path, harness, overrides, spec):
    run = Run.made(RunOptions(mode="eval", overrides=(*FAST, *overrides), rootdir=tmp_path, out=tmp_path / "out"),
                   terminal=None, harness=harness)
    items = [(f"{spec.name}::{index}", item) for index, item in enumerate(run.plan(spec))]
    outcomes = drive_items(run, items, lambda item_id, item: {"rollout": run.rollout_for(item_id), "row": dict(item.row)})
    assert not run.finish()
    records = [json.loads(line) for line in (run.run_dir / "rollouts.jsonl").read_text().splitlines()]
    return run, outcomes, records


def _pointwise(body):
    """Score 1 when the transcript shows the reply "4"; a malformed answer when it shows "5"."""
    work = body["messages"][1]["content"]
    return '{"score": 1, "reason": "right"}' if '"reply": "4"' in work else "It says 5, so I would give it a zero."


def test_a_judged_reward_scores_rollouts_counts_judge_errors_and_rescore_reuses_its_answers(
        tmp_path, build_harness, monkeypatch):
    judged = arl.judge_reward(rubric=RUBRIC, name="quality")
    spec = make_spec(tmp_path, samples=2, rewards=[judged])
    with ScriptedJudgeServer(_pointwise) as server:
        # one session at a time: the sampler's replies alternate 4 / 5 in call order, so each row gets
        # one of each (concurrent sessions could give a row two equal replies: one question, not two)
        overrides = _judge_config(server, monkeypatch, "roles.judge.retries=1", "runtime.concurrency=1",
                                  "roles.judge.price.prompt_per_mtok=1.0", "roles.judge.price.completion_per_mtok=4.0")
        run, outcomes, records = _eval(tmp_path, build_harness(*overrides), overrides, spec)
        asked = len(server.requests)
        assert asked == 2 + 2 * 2  # rows r0, r1: sample 0 says 4 (one call), sample 1 says 5 (asked twice)
        by_reply = {r["result"]["reply"]: r for r in records}
        assert (by_reply["4"]["status"], by_reply["4"]["rewards"], by_reply["4"]["success"]) == ("completed", {"quality": 1.0}, True)
        failed = by_reply["5"]
        assert (failed["status"], failed["reward"], failed["success"]) == ("judge_error", None, None)
        assert "malformed answer 'It says 5" in failed["error"] and "roles.judge.retries=1" in failed["error"]
        assert sorted(outcomes.values()) == ["ItemFailed", "ItemFailed", "passed", "passed"]
        report = json.loads((run.run_dir / "report.json").read_text())
        assert report["overall"]["failures"] == {"judge_error": 2}
        assert report["overall"]["success_rate"]["n"] == 2 and report["overall"]["success_rate"]["value"] == 1.0
        judge = report["roles"]["judge"]
        assert (judge["calls"], judge["cached"], judge["failed_attempts"], judge["judge_errors"]) == (6, 0, 4, 2)
        assert judge["completion_tokens"] > 0 and judge["cost_usd"] == pytest.approx(
            (judge["prompt_tokens"] * 1.0 + judge["completion_tokens"] * 4.0) / 1e6)
        assert report["roles"]["policy"]["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in records)
        assert "## Usage by role" in (run.run_dir / "report.md").read_text()

        done = rescore(run.run_dir, {spec.name: spec}, write=lambda line: None)
        assert len(server.requests) == asked + 2 * 2  # the scored answers came from the cache; failures asked again
    new = [json.loads(line) for line in (done.out_dir / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in new) == ["completed", "completed", "judge_error", "judge_error"]
    assert done.report.roles["judge"].cached == 2


def test_a_group_is_judged_in_one_call_with_scores_relative_to_each_other(tmp_path, build_harness, monkeypatch):
    def ranked(body):
        text = body["messages"][1]["content"]
        attempts = text.split("=== Attempt ")[1:]
        return json.dumps({"scores": [{"id": i, "score": 1.0 if '"reply": "4"' in part else 0.25}
                                      for i, part in enumerate(attempts, 1)]})

    @arl.judge_reward(rubric=RUBRIC, group=True)
    def relative(rollout, row):
        return f"reply: {json.dumps(rollout.result)} (row {row['id']})"

    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"r{i}", "split": "test"}) + "\n" for i in range(2)))

    def test_grouped(rollout, row):
        assert rollout.rewards["relative"] in (1.0, 0.25)

    spec = task_spec(arl.task(dataset=str(dataset), samples=4, rewards=[relative], name="grouped")(test_grouped))
    with ScriptedJudgeServer(ranked) as server:
        overrides = _judge_config(server, monkeypatch)
        _, outcomes, records = _eval(tmp_path, build_harness(*overrides), overrides, spec)
    assert len(server.requests) == 2  # one call per group (row), not one per rollout
    assert all("4 attempts" in request["messages"][0]["content"] for request in server.requests)
    assert set(outcomes.values()) == {"passed"}
    for record in records:
        assert record["rewards"] == {"relative": 1.0 if record["result"]["reply"] == "4" else 0.25}
    assert "reply: " in server.requests[0]["messages"][1]["content"]  # the decorated transcript function


def test_a_policy_judge_samples_the_policy_directly_and_never_enters_a_trace(
        tmp_path, scripted_harness, tiny_tokenizer, monkeypatch):
    from agentcore_rl_harness.runtimes.fake import FakeRuntime
    from run_fakes import ask_gateway

    judged_prompts = []

    def replies(prompt, params):
        if POINTWISE_SYSTEM in tiny_tokenizer.decode(prompt):
            judged_prompts.append(prompt)
            return '{"score": 1}'
        return "4"

    spec = make_spec(tmp_path, samples=2, rewards=[arl.judge_reward(rubric=RUBRIC)])
    harness = scripted_harness([*FAST, "roles.judge.kind=policy"], runtime=FakeRuntime(ask_gateway), replies=replies)
    run, outcomes, records = _eval(tmp_path, harness, [], spec)
    assert set(outcomes.values()) == {"passed"} and all(r["rewards"] == {"judge": 1.0} for r in records)
    assert len(judged_prompts) == 2  # per row: both samples show the same work, one question asked once
    assert len(harness.sampler.calls) == 4 + 2
    for record in records:  # each trace is the agent's own turn; the judge's prompt is in none
        assert len(record["traces"]) == 1 and record["turns"] == 1
        tokens = record["traces"][0]["token_ids"]
        assert POINTWISE_SYSTEM not in tiny_tokenizer.decode(tokens)
    report = json.loads((run.run_dir / "report.json").read_text())
    assert report["roles"]["policy"]["calls"] == 4 and report["roles"]["judge"]["calls"] == 2


def test_an_openai_judge_without_its_key_is_a_judge_error_naming_the_variable(tmp_path, build_harness, monkeypatch):
    """A judge set up wrong is the judge's failure (judge_error), not a bug in the task (task_error)."""
    monkeypatch.delenv("ARL_UNSET_JUDGE_KEY", raising=False)
    spec = make_spec(tmp_path, samples=1, rewards=[arl.judge_reward(rubric=RUBRIC)])
    with ScriptedJudgeServer(['{"score": 1}']) as server:
        overrides = ["roles.judge.kind=openai", "roles.judge.model=judge-test", f"roles.judge.base_url={server.base_url}",
                     "roles.judge.api_key_env=ARL_UNSET_JUDGE_KEY"]
        _, outcomes, records = _eval(tmp_path, build_harness(*overrides), overrides, spec)
    assert not server.requests
    assert {r["status"] for r in records} == {"judge_error"} and set(outcomes.values()) == {"ItemFailed"}
    assert all("could not be set up" in r["error"] and "ARL_UNSET_JUDGE_KEY, which is not set" in r["error"]
               for r in records)
