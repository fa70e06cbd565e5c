"""A rollout that spans two policy versions (async training: the weights change between its
turns) is one trace whose every sampled token keeps the logprob of the version that sampled it,
so the loss's per-token importance ratio is against the right policy, and the masks are exact."""

from __future__ import annotations

import math

import pytest

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
from agentcore_rl_harness.gateway.trajectory import TurnTree
from agentcore_rl_harness.records import FinishReason, SampleResult
from agentcore_rl_harness.trainers.base import TrainGroup, TrainSample
from agentcore_rl_harness.trainers.grpo import build_batch, policy_loss, staleness

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    renderer = ChatTemplateRenderer(tokenizer, chat_template=load_template())
    renderer.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")  # the test's note, not the API
    return renderer


def _turn(tree, renderer, messages, text, *, version, base):
    """Sample `text` under policy `version`; logprobs unique per token (`base` - i / 1e4)."""
    ids = (*renderer.encode(text), renderer.im_end)
    logprobs = tuple(base - i / 1e4 for i in range(len(ids)))
    reply = renderer.parse_reply(text)
    turn = tree.record(tree.plan(messages, TOOLS), SampleResult(ids, logprobs, FinishReason.STOP, version), reply)
    return turn, ids, logprobs, reply


def test_a_rollout_across_two_versions_keeps_each_turns_logprobs_ratios_and_masks(renderer):
    torch = pytest.importorskip("torch")
    tree = TurnTree(renderer)
    history = [{"role": "user", "content": "1+2?"}]
    turn1, ids1, lps1, reply1 = _turn(tree, renderer, history, CALL, version=3, base=-0.1)
    message = {"role": "assistant", "content": reply1.content, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]}
    history += [message, {"role": "tool", "tool_call_id": "c0", "content": "3"}]
    # the trainer published version 4 between the turns; the session went on
    turn2, ids2, lps2, _ = _turn(tree, renderer, history, "It is 3.", version=4, base=-2.0)

    (trace,) = tree.traces()
    assert trace.metadata["policy_versions"] == [3, 4]
    start1 = len(turn1.prompt_token_ids) - trace.prompt_length
    start2 = len(turn2.prompt_token_ids) - trace.prompt_length
    gap = start2 - (start1 + len(ids1))
    assert start1 == 0 and gap > 0  # the tool result and template glue between the turns
    assert trace.loss_mask == (1,) * len(ids1) + (0,) * gap + (1,) * len(ids2)
    assert trace.logprobs == (*lps1, *(None,) * gap, *lps2)  # each turn's own version's logprobs

    group = TrainGroup("g", (TrainSample("g/0", 1.0, (trace,)), TrainSample("g/1", 0.0, ())))
    (item,), _ = build_batch([group], normalize_std=False)
    assert item.policy_version == 3 and staleness([item], 5) == [2]  # lag counts from the oldest turn
    assert item.old_logprobs == (*lps1, *(0.0,) * gap, *lps2)
    assert item.advantage == 0.5

    # the current policy: +0.5 nats on turn 1's tokens (ratio e^0.5, past PPO's 1 + 0.28), equal
    # on turn 2's (ratio 1); glue tokens are masked out whatever their logprob
    new = [old + 0.5 for old in lps1] + [-7.0] * gap + list(lps2)
    out = policy_loss(torch.tensor([new], dtype=torch.float64), torch.tensor([item.old_logprobs], dtype=torch.float64),
                      torch.tensor([item.advantage], dtype=torch.float64),
                      torch.tensor([item.loss_mask]), clip_low=0.2, clip_high=0.28, tis_cap=None,
                      kl_coef=0.0, ref_logprobs=None)
    assert out.clipped_tokens == len(ids1)  # exactly turn 1's tokens, not turn 2's, not the glue
    trained = len(ids1) + len(ids2)
    expected = -0.5 * (len(ids1) * 1.28 + len(ids2) * 1.0) / trained  # max(-A r, -A clip(r)) per token
    assert float(out.loss) == pytest.approx(expected, abs=1e-12)
    assert out.sampler_kl_sum == pytest.approx(len(ids1) * (math.exp(-0.5) + 0.5 - 1), abs=1e-9)
