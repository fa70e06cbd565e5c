"""Per-task limits (`@arl.task(limits=...)`, `records.TaskLimits`, `gateway/task_budget.py`): bad
limits are refused when the task is declared, and an episode that runs into one is
`limit_exceeded` naming the limit, over the fakes (ScriptedSampler, FakeRuntime)."""

import json

import httpx
import pytest
from run_driver import drive_items
from run_fakes import FAST, write_rows

import agentcore_rl_harness as arl
from agentcore_rl_harness.run.core import Run
from agentcore_rl_harness.run.options import RunOptions
from agentcore_rl_harness.runtimes.fake import FakeRuntime
from agentcore_rl_harness.tasks import task_spec


@pytest.mark.parametrize("limits, message", [
    ({"max_turn": 3}, "unknown limit(s) ['max_turn']; valid limits: ['max_tokens', 'max_turns', 'max_tool_calls', 'timeout_s']"),
    ({"max_turns": 0}, "limits['max_turns']=0 must be a positive integer"),
    ({"max_tokens": 2.5}, "limits['max_tokens']=2.5 must be a positive integer"),
    ({"timeout_s": -1}, "limits['timeout_s']=-1 must be a positive number of seconds"),
    ([("max_turns", 3)], "limits must be a dict such as"),
])
def test_bad_limits_are_refused_when_the_task_is_declared(limits, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        arl.task(dataset="rows.jsonl", limits=limits)


async def three_turns(session):
    """An agent that asks the model three times, as a looping agent would."""
    replies = []
    async with httpx.AsyncClient(base_url=session.base_url, timeout=20) as client:
        for _ in range(3):
            response = await client.post("/chat/completions", headers={"Authorization": f"Bearer {session.api_key}"},
                                         json={"model": "m", "messages": [{"role": "user", "content": "2+2?"}]})
            response.raise_for_status()
            replies.append(response.json()["choices"][0]["message"]["content"])
    return {"reply": replies[-1]}


def _records(tmp_path, scripted_harness, limits):
    dataset = write_rows(tmp_path / "rows.jsonl", test=1)

    def test_looping(rollout, row):
        pass

    spec = task_spec(arl.task(dataset=str(dataset), samples=1, name="looping", limits=limits)(test_looping))
    harness = scripted_harness(FAST, runtime=FakeRuntime(three_turns), replies=lambda prompt, params: "4")
    out = tmp_path / ("out-" + "-".join(sorted(limits or {"none": 0})))
    run = Run.made(RunOptions(mode="eval", overrides=tuple(FAST), rootdir=tmp_path, out=out), terminal=None,
                   harness=harness)
    items = [(f"looping::{index}", item) for index, item in enumerate(run.plan(spec))]
    outcomes = drive_items(run, items, lambda item_id, item: {"rollout": run.rollout_for(item_id), "row": dict(item.row)})
    run.finish()
    report = json.loads((run.run_dir / "report.json").read_text())
    return [json.loads(line) for line in (run.run_dir / "rollouts.jsonl").read_text().splitlines()], outcomes, report


def test_an_episode_past_its_turn_limit_is_limit_exceeded_naming_the_limit(tmp_path, scripted_harness):
    records, _, _ = _records(tmp_path, scripted_harness, None)
    assert records[0]["status"] == "completed" and records[0]["turns"] == 3  # the run's own limits allow it

    (record,), outcomes, report = _records(tmp_path, scripted_harness, {"max_turns": 2})
    assert record["status"] == "limit_exceeded" and record["turns"] == 2
    assert record["error"].startswith("limit_exceeded: task limit max_turns=2 (@arl.task(limits=...))")
    assert "task.max_turns" in record["traces"][0]["metadata"]["limits_hit"]
    assert set(outcomes.values()) == {"ItemFailed"}
    # the agent's failure: counted in the success rate (unlike judge_error), listed under failures
    assert report["overall"]["failures"] == {"limit_exceeded": 1} and report["overall"]["success_rate"]["n"] == 1
