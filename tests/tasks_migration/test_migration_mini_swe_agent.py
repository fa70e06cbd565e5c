"""mini-swe-agent (PyPI, unchanged) as a migration task's agent: the pack's oracle migration,
rewritten as the bash commands mini-swe-agent's one tool runs, played as the model's replies
through the real gateway (OpenAI chat completions from litellm, as mini-swe-agent sends them);
its commands run in the isolated session, the pack's rewards pass, and the trace is exact."""

from __future__ import annotations

import pytest

import agentcore_rl_harness as arl
from migration_harness import PACK, hermes_text, play

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash_script(row: dict) -> list[dict]:
    """The oracle's migration as mini-swe-agent's `bash` tool calls, ending with its submit command."""
    turns = []
    for target in row["targets"]:
        path = target["path"]
        turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": f"cat {path}"}}]})
        turns.append({"tool_calls": [{"name": "bash", "arguments": {
            "command": f"cat > {path} <<'MIGRATED_EOF'\n{row['migrated'][path]}MIGRATED_EOF"}}]})
    turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": "python -m unittest 2>&1 | tail -3"}}]})
    turns.append({"tool_calls": [{"name": "bash", "arguments": {"command": SUBMIT}}]})
    return turns


async def test_mini_swe_agent_migrates_the_project_through_the_gateway(pack_rows, tasks, renderer):
    spec = tasks.TASK

    @arl.task(dataset=str(PACK / "data" / "level1.jsonl"), **{**spec, "agent": str(PACK / "mini_swe_agent.py")})
    def test_migration_mini(rollout, row):
        pass

    row = pack_rows[1][-1]
    script = bash_script(row)
    replies = [hermes_text(turn) for turn in script]
    played = await play(test_migration_mini, row, replies, renderer)
    assert played.handle.status.value == "completed", played.handle.error
    result = played.handle.result
    assert result["exit_status"] == "Submitted", result
    assert result["changed_files"] == sorted(t["path"] for t in row["targets"])
    assert result["model_calls"] == len(script) and result["tool_calls"] == len(script)
    assert played.rewards == {"files_migrated": 1.0, "tests_pass": 1.0}
    (trace,) = played.episode.traces  # one linear conversation, trained on the sampled tokens only
    assert sum(trace.loss_mask) == sum(len(renderer.encode(text)) + 1 for text in replies)  # + <|im_end|>
