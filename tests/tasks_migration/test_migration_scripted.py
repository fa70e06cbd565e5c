"""The pack's oracle script played through its real agent (Strands, in an isolated local
session, behind the real gateway) reaches every reward; its traces are exact."""

from __future__ import annotations

import pytest

from migration_harness import hermes_text, play

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]


@pytest.mark.parametrize("level", [1, 3])
async def test_the_oracle_script_through_the_agent_passes_every_check(level, pack_rows, tasks, renderer):
    row = pack_rows[level][-1]  # a test row
    script = tasks.oracle_script(row)["_script"]
    replies = [hermes_text(turn) for turn in script]
    played = await play(getattr(tasks, f"test_migration_level{level}"), row, replies, renderer)
    assert played.handle.status.value == "completed", played.handle.error
    assert played.rewards == {"files_migrated": 1.0, "tests_pass": 1.0}
    result = played.handle.result
    assert result["stop_reason"] == "end_turn"
    assert sorted(result["changed_files"]) == sorted(t["path"] for t in row["targets"])
    assert result["tool_calls"] == len(script) - 1 and result["model_calls"] == len(script)
    (trace,) = played.episode.traces  # one linear conversation: one training row
    assert trace.metadata["tool_calls"] == len(script) - 1 and trace.metadata["forks"] == 0
    assert sum(trace.loss_mask) == sum(len(renderer.encode(text)) + 1 for text in replies)  # + <|im_end|>
