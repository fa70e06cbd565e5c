"""The office pack's MCP level end to end: the office tools served by `office_mcp_server.py`,
which the harness starts inside each isolated session (streamable HTTP on the session's own
loopback), and the Strands agent (`mcp_agent.py`) calling them through Strands' MCP client,
behind the real gateway with `ScriptedSampler` playing the row's oracle script."""

from __future__ import annotations

import time

import pytest
from office_pack import load, rows, run_cases

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports.transcript import transcript

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return ChatTemplateRenderer(load_tokenizer(tiny_model_dir))


def test_the_oracle_reaches_reward_1_through_mcp_tools_and_the_transcript_shows_them(renderer, tiny_model_dir):
    from agentcore_rl_harness.reports.tokenizer import Tokenizer

    row = next(r for r in rows(1) if r["split"] == "test" and r["template"] == "mail_forward")
    started = time.monotonic()
    (rollout, episode), = run_cases(renderer, [(row, row["script"])], task="test_office_mcp")
    assert rollout.status is Status.COMPLETED, rollout.error
    assert rollout.reward == 1.0 and rollout.success, rollout.error
    scripted = [call["name"] for turn in row["script"] for call in turn.get("tool_calls", [])]
    assert rollout.result["tool_calls"] == scripted and rollout.result["stopped"] is None
    # the tools the agent got are the MCP server's, listed over the protocol
    assert rollout.result["tools"] == sorted(load("office_tools").NAMES)
    (trace,) = rollout.traces  # one exact token sequence, trainable
    assert sum(trace.loss_mask) > 0 and len(trace.logprobs) == len(trace.token_ids) - trace.prompt_length
    messages = transcript(trace.token_ids, trace.prompt_length, trace.loss_mask, Tokenizer(tiny_model_dir, ""))
    called = [call.name for m in messages if m.role == "assistant" and m.trained for call in m.tool_calls]
    assert called == scripted
    results = [m.content for m in messages if m.role == "tool"]
    recipient = row["guards"]["recipients"][0]
    assert any(f"sent to {recipient}" in text for text in results), results  # the MCP server's answer
    print(f"oracle through MCP: {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize("agent", ["null", "spam"])
def test_the_null_and_spam_agents_score_zero(renderer, agent):
    row = rows(1)[0]
    (rollout, _), = run_cases(renderer, [(row, [])], f"agent={agent}", task="test_office_mcp")
    assert rollout.status is Status.TASK_FAILED and rollout.reward == 0.0 and rollout.success is False
