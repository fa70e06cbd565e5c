"""The pack's Strands agent on its failure paths, through the real gateway and local runtime: a
reply cut at max_tokens and the model-call budget end the episode as the agent's outcome (a
scored rollout with its trace), never a lost sample; its tools stay inside the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from migration_harness import hermes_text, load_pack_module, play


@pytest.fixture(scope="module")
def agent_module():
    pytest.importorskip("strands", reason="pip install strands-agents")
    return load_pack_module("migration_pack_agent", "agent.py")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_reply_cut_at_max_tokens_is_the_agents_failure_with_its_trace(pack_rows, tasks, renderer):
    row = pack_rows[1][0]
    script = tasks.oracle_script(row)["_script"]
    replies = [hermes_text(turn) for turn in script]  # the write_file call is far over 64 tokens
    played = await play(tasks.test_migration_level1, row, replies, renderer, max_tokens=64)
    assert played.handle.status.value == "completed", played.handle.error
    assert played.handle.result["stop_reason"] == "max_tokens"
    assert played.rewards == {"files_migrated": 0.0, "tests_pass": 0.0}
    (trace,) = played.episode.traces
    assert trace.finish_reason == "length" and sum(trace.loss_mask) > 64  # both turns' tokens kept
    assert len(played.sampler.calls) == 2


@pytest.mark.slow
@pytest.mark.asyncio
async def test_the_model_call_budget_ends_the_episode(pack_rows, tasks, renderer, agent_module):
    row = pack_rows[1][0]
    listing = hermes_text({"tool_calls": [{"name": "list_files", "arguments": {}}]})
    played = await play(tasks.test_migration_level1, row, [listing] * agent_module.MAX_MODEL_CALLS, renderer)
    assert played.handle.status.value == "completed", played.handle.error
    result = played.handle.result
    assert result["stop_reason"] == "model_call_budget"
    assert result["model_calls"] == agent_module.MAX_MODEL_CALLS == len(played.sampler.calls)
    assert result["tool_calls"] == agent_module.MAX_MODEL_CALLS and result["changed_files"] == []
    assert played.rewards == {"files_migrated": 0.0, "tests_pass": 0.0}


def test_tools_act_inside_the_project_only(tmp_path, agent_module):
    workspace = agent_module.Workspace(tmp_path / "project")
    workspace.lay_out({"cli.py": "x = 1\n", "pkg/mod.py": "y = 2\n"})
    tools = {t.tool_name: t for t in agent_module.make_tools(workspace)}
    assert tools["list_files"]() == "cli.py\npkg/mod.py"
    assert tools["read_file"](path="cli.py") == "x = 1\n"
    assert tools["read_file"](path="../outside.txt").startswith("error:") and "outside the project" in \
        tools["read_file"](path="../outside.txt")
    assert tools["write_file"](path="/etc/passwd2", content="no").startswith("error:")
    assert not Path("/etc/passwd2").exists()
    assert tools["write_file"](path="cli.py", content="x = 2\n") == "wrote 6 characters to cli.py"
    ran = tools["run"](command="python -c 'import cli; print(cli.x)'")
    assert ran == "exit code 0\n2\n"
    assert tools["run"](command="exit 3").startswith("exit code 3")
