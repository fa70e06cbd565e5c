"""The turn tree: exact sampled tokens reused across turns, forks, drift, and linearization."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from chat_templates import STRIPS_THINK

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
from agentcore_rl_harness.gateway.trajectory import TurnTree
from agentcore_rl_harness.records import FinishReason, SampleResult

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
SYSTEM = {"role": "system", "content": "You add numbers with the add tool."}


class Agent:
    """Plays the sampler and the client: records a turn and returns the message a client gets."""

    def __init__(self, tree, renderer, im_end):
        self.tree, self.renderer, self.im_end = tree, renderer, im_end
        self.sampled = []  # (token ids, logprobs) of every turn, in order

    def turn(self, messages, reply_text, *, tools=TOOLS, truncated=False):
        plan = self.tree.plan(messages, tools)
        reply_ids = self.renderer.encode(reply_text)
        ids = tuple(reply_ids if truncated else [*reply_ids, self.im_end])
        label = len(self.sampled)
        logprobs = tuple(-(label * 1000 + i + 1) / 1e4 for i in range(len(ids)))  # unique per token
        sample = SampleResult(ids, logprobs, FinishReason.LENGTH if truncated else FinishReason.STOP)
        reply = self.renderer.parse_reply(self.renderer.decode(reply_ids))
        turn = self.tree.record(plan, sample, reply)
        self.sampled.append((ids, logprobs))
        return turn, client_message(reply, label)


def client_message(reply, label):
    """The assistant message an OpenAI client holds for `reply` (ids, arguments as JSON strings)."""
    message = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{label}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(reply.tool_calls)]
    return message


def call(a, b):
    return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def tool_result(message, content):
    return {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": content}


def sampled_span(trace, turn):
    start = len(turn.prompt_token_ids)
    return trace.token_ids[start:start + len(turn.completion_token_ids)]


def test_linear_three_turn_tool_conversation_is_one_exact_trace(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    history = [SYSTEM, {"role": "user", "content": "What is 1+2+3?"}]
    turn1, reply1 = agent.turn(history, call(1, 2))
    history += [reply1, tool_result(reply1, "3")]
    turn2, reply2 = agent.turn(history, "Now the rest.\n" + call(3, 3))
    history += [reply2, tool_result(reply2, "6")]
    turn3, reply3 = agent.turn(history, "The answer is 6.")
    history.append(reply3)

    (trace,) = agent.tree.traces()
    assert trace.token_ids[:trace.prompt_length] == turn1.prompt_token_ids
    assert turn1.prompt_token_ids == tuple(renderer.encode(renderer.render(history[:2], tools=TOOLS)))
    # No drift: the exact trace equals the tokenised full conversation (minus the final "\n").
    assert list(trace.token_ids) == renderer.encode(renderer.render(history, tools=TOOLS, add_generation_prompt=False))[:-1]
    tail = trace.token_ids[trace.prompt_length:]
    expected_mask = [0] * len(tail)
    for turn, (ids, logprobs) in zip((turn1, turn2, turn3), agent.sampled):
        assert sampled_span(trace, turn) == ids
        start = len(turn.prompt_token_ids) - trace.prompt_length
        assert trace.logprobs[start:start + len(ids)] == logprobs
        expected_mask[start:start + len(ids)] = [1] * len(ids)
    assert list(trace.loss_mask) == expected_mask
    assert all((lp is None) == (m == 0) for m, lp in zip(trace.loss_mask, trace.logprobs))
    glue = renderer.decode([t for t, m in zip(tail, trace.loss_mask) if m == 0])
    assert glue == "\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n" \
                   "\n<|im_start|>user\n<tool_response>\n6\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert trace.finish_reason == "stop"
    assert trace.metadata == {"turns": 3, "forks": 0, "drift_events": 0, "tool_calls": 2, "ill_formed": 0,
                              "truncated": 0, "policy_versions": [0]}


def test_edited_history_forks_and_keeps_original_tokens_trained(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    history = [SYSTEM, {"role": "user", "content": "1+2?"}]
    turn1, reply1 = agent.turn(history, call(1, 2))
    turn2, reply2 = agent.turn([*history, reply1, tool_result(reply1, "3")], "It is 3.")
    turn3, _ = agent.turn([*history, reply1, tool_result(reply1, "4")], "It is 4.")  # edited tool result

    assert turn2.parent == turn1.index and turn3.parent == turn1.index and turn3.fork
    first, second = agent.tree.traces()
    assert sampled_span(first, turn1) == sampled_span(second, turn1) == turn1.completion_token_ids
    n1 = len(turn1.completion_token_ids)
    assert first.loss_mask[:n1] == (1,) * n1 and second.loss_mask[:n1] == (0,) * n1
    assert second.logprobs[:n1] == first.logprobs[:n1] == agent.sampled[0][1]
    assert sum(first.loss_mask) + sum(second.loss_mask) == sum(len(ids) for ids, _ in agent.sampled)
    assert second.metadata["forks"] == 1 and first.metadata["forks"] == 0


def test_unrelated_request_is_a_new_root_and_counts_a_fork(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    agent.turn([{"role": "user", "content": "a"}], "A")
    turn, _ = agent.turn([{"role": "user", "content": "b"}], "B", tools=None)
    assert turn.parent is None and turn.fork
    assert turn.prompt_token_ids == tuple(renderer.encode(renderer.render([{"role": "user", "content": "b"}])))
    assert len(agent.tree.traces()) == 2


def test_reasoning_dropped_by_the_template_is_drift_but_sampled_tokens_stay(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    history = [{"role": "user", "content": "2+2?"}]
    turn1, reply1 = agent.turn(history, "<think>two and two</think>\n4")
    assert reply1["content"] == "4" and reply1["reasoning_content"] == "two and two"
    turn2, _ = agent.turn([*history, reply1, {"role": "user", "content": "sure?"}], "Yes.")
    assert turn2.parent == turn1.index and turn2.drift
    (trace,) = agent.tree.traces()
    assert sampled_span(trace, turn1) == turn1.completion_token_ids
    after = trace.token_ids[len(turn1.prompt_token_ids) + len(turn1.completion_token_ids):len(turn2.prompt_token_ids)]
    assert renderer.decode(after) == "\n<|im_start|>user\nsure?<|im_end|>\n<|im_start|>assistant\n"
    assert trace.metadata["drift_events"] == 1 and trace.metadata["forks"] == 0


def test_reformatted_tool_call_arguments_still_match(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    history = [{"role": "user", "content": "add"}]
    turn1, reply1 = agent.turn(history, call(1, 2))
    reply1["tool_calls"][0]["function"]["arguments"] = json.dumps({"b": 2, "a": 1}, indent=2)
    turn2, _ = agent.turn([*history, reply1, tool_result(reply1, "3")], "3")
    assert turn2.parent == turn1.index
    assert turn2.drift  # re-rendered with keys in the client's order; the sampled ids are used
    assert len(agent.tree.traces()) == 1


def test_truncated_reply_gets_end_of_turn_as_untrained_glue(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    history = [{"role": "user", "content": "count"}]
    turn1, reply1 = agent.turn(history, "one two thr", truncated=True)
    turn2, _ = agent.turn([*history, reply1, {"role": "user", "content": "go on"}], "ee")
    assert turn2.parent == turn1.index and not turn2.drift
    (trace,) = agent.tree.traces()
    glue_start = len(turn1.prompt_token_ids) + len(turn1.completion_token_ids)
    assert trace.token_ids[glue_start] == im_end
    assert trace.loss_mask[glue_start - trace.prompt_length] == 0
    assert trace.metadata["truncated"] == 1 and trace.finish_reason == "stop"


# One step: continue from an earlier turn (index modulo the turns so far) or start fresh.
steps = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 50)),
              st.sampled_from(["text", "tool", "think", "cut"]),
              st.text(alphabet="abc 123", min_size=1, max_size=6)),
    min_size=1, max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_every_sampled_token_is_trained_exactly_once(renderer, im_end, steps):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    conversations = []  # the history a client holds after each turn
    for branch, kind, text in steps:
        if branch is None or not conversations:
            messages = [{"role": "user", "content": text}]
        else:
            messages = [*conversations[branch % len(conversations)], {"role": "user", "content": text}]
        reply_text = {"text": text, "tool": call(1, len(text)), "think": f"<think>{text}</think>ok",
                      "cut": text}[kind]
        _, reply = agent.turn(messages, reply_text, truncated=kind == "cut")
        conversations.append([*messages, reply])

    traces = agent.tree.traces()
    root_prompts = {t.prompt_token_ids for t in agent.tree.turns if t.parent is None}
    trained = Counter()
    for trace in traces:
        assert trace.token_ids[:trace.prompt_length] in root_prompts
        for position, (mask, logprob) in enumerate(zip(trace.loss_mask, trace.logprobs)):
            if mask:
                trained[(trace.token_ids[trace.prompt_length + position], logprob)] += 1
    expected = Counter((token, lp) for ids, logprobs in agent.sampled for token, lp in zip(ids, logprobs))
    assert trained == expected  # logprobs are unique per sampled token: each trained exactly once
    turns = agent.tree.turns
    for turn in turns:  # every turn's sampled ids sit verbatim in some trace
        assert any(sampled_span(t, turn) == turn.completion_token_ids for t in traces)
    assert len(traces) == len([t for t in turns if t.index not in {u.parent for u in turns}])


@pytest.fixture(scope="module")
def qwen3_renderer(smol_tokenizer):
    return ChatTemplateRenderer(smol_tokenizer, chat_template=STRIPS_THINK)


def _qwen3_session(tree, renderer, im_end):
    """user -> (think) reply -> user -> reply: the template drops the first turn's <think>."""
    agent = Agent(tree, renderer, im_end)
    history = [{"role": "user", "content": "2+2?"}]
    turn1, reply1 = agent.turn(history, "<think>\ntwo and two\n</think>\n\n4", tools=None)
    history += [reply1, {"role": "user", "content": "sure?"}]
    turn2, reply2 = agent.turn(history, "<think>\nyes\n</think>\n\nYes.", tools=None)
    return agent, turn1, turn2


def test_history_exact_keeps_sampled_think_tokens_and_counts_drift(qwen3_renderer, im_end):
    agent, turn1, turn2 = _qwen3_session(TurnTree(qwen3_renderer, history="exact"), qwen3_renderer, im_end)
    assert turn2.parent == turn1.index and turn2.drift and not turn2.fork
    (trace,) = agent.tree.traces()
    assert sampled_span(trace, turn1) == turn1.completion_token_ids  # the model's own <think> tokens, as context
    assert "<think>\ntwo and two\n</think>" in qwen3_renderer.decode(turn2.prompt_token_ids)
    assert qwen3_renderer.decode(turn2.prompt_token_ids).endswith("4<|im_end|>\n<|im_start|>user\nsure?<|im_end|>\n<|im_start|>assistant\n")
    assert trace.metadata["drift_events"] == 1 and trace.metadata["forks"] == 0
    assert sum(trace.loss_mask) == sum(len(ids) for ids, _ in agent.sampled)


def test_history_template_forks_where_the_rendering_drops_sampled_tokens(qwen3_renderer, im_end):
    agent, turn1, turn2 = _qwen3_session(TurnTree(qwen3_renderer, history="template"), qwen3_renderer, im_end)
    history = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "sure?"}]
    assert turn2.prompt_token_ids == tuple(qwen3_renderer.encode(qwen3_renderer.render(history)))  # what deployment shows
    assert turn2.parent is None and turn2.drift and turn2.fork
    first, second = agent.tree.traces()
    assert sampled_span(first, turn1) == turn1.completion_token_ids and first.loss_mask == (1,) * len(turn1.completion_token_ids)
    assert sampled_span(second, turn2) == turn2.completion_token_ids
    assert second.metadata == {**second.metadata, "forks": 1, "drift_events": 1, "turns": 1}
    assert sum(first.loss_mask) + sum(second.loss_mask) == sum(len(ids) for ids, _ in agent.sampled)


def test_history_template_continues_the_row_while_the_rendering_matches(renderer, im_end):
    agent = Agent(TurnTree(renderer, history="template"), renderer, im_end)
    history = [SYSTEM, {"role": "user", "content": "1+2?"}]
    turn1, reply1 = agent.turn(history, call(1, 2))
    turn2, _ = agent.turn([*history, reply1, tool_result(reply1, "3")], "It is 3.")
    assert turn2.parent == turn1.index and not turn2.drift
    (trace,) = agent.tree.traces()
    assert trace.metadata["drift_events"] == 0 and trace.metadata["forks"] == 0


def test_unknown_history_mode_is_refused(renderer):
    with pytest.raises(ValueError, match="history='verbatim' .* choose one of exact, template"):
        TurnTree(renderer, history="verbatim")


def test_sub_agent_with_its_own_system_prompt_is_its_own_row(renderer, im_end):
    agent = Agent(TurnTree(renderer), renderer, im_end)
    main = [SYSTEM, {"role": "user", "content": "1+2, then ask the checker"}]
    sub = [{"role": "system", "content": "You check sums."}, {"role": "user", "content": "is 1+2=3?"}]
    main1, main_reply1 = agent.turn(main, call(1, 2))
    sub1, sub_reply1 = agent.turn(sub, "Checking.\n" + call(1, 2))  # same key, interleaved
    main2, _ = agent.turn([*main, main_reply1, tool_result(main_reply1, "3")], "It is 3.")
    sub2, _ = agent.turn([*sub, sub_reply1, tool_result(sub_reply1, "3")], "Yes.")
    assert (main2.parent, sub1.parent, sub2.parent) == (main1.index, None, sub1.index) and sub1.fork
    main_trace, sub_trace = agent.tree.traces()
    assert renderer.decode(main_trace.token_ids).startswith(f"<|im_start|>system\n{SYSTEM['content']}")
    assert renderer.decode(sub_trace.token_ids).startswith("<|im_start|>system\nYou check sums.")
    assert [sampled_span(main_trace, t) for t in (main1, main2)] == [main1.completion_token_ids, main2.completion_token_ids]
    assert [sampled_span(sub_trace, t) for t in (sub1, sub2)] == [sub1.completion_token_ids, sub2.completion_token_ids]
    assert (main_trace.metadata["turns"], sub_trace.metadata["turns"]) == (2, 2)
    assert sum(main_trace.loss_mask) + sum(sub_trace.loss_mask) == sum(len(ids) for ids, _ in agent.sampled)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, history=st.sampled_from(["exact", "template"]))
def test_every_sampled_token_is_trained_exactly_once_with_a_think_stripping_template(qwen3_renderer, im_end, steps, history):
    agent = Agent(TurnTree(qwen3_renderer, history=history), qwen3_renderer, im_end)
    conversations = []
    for branch, kind, text in steps:
        base = [] if branch is None or not conversations else conversations[branch % len(conversations)]
        messages = [*base, {"role": "user", "content": text}]
        reply_text = {"text": text, "tool": text, "think": f"<think>\n{text}\n</think>\n\nok", "cut": text}[kind]
        _, reply = agent.turn(messages, reply_text, tools=None, truncated=kind == "cut")
        conversations.append([*messages, reply])
    trained = Counter()
    for trace in agent.tree.traces():
        for position, (mask, logprob) in enumerate(zip(trace.loss_mask, trace.logprobs)):
            if mask:
                trained[(trace.token_ids[trace.prompt_length + position], logprob)] += 1
    assert trained == Counter((token, lp) for ids, logprobs in agent.sampled for token, lp in zip(ids, logprobs))


def _cached_vs_uncached_prompts(renderer, im_end, replies, monkeypatch, tools=TOOLS):
    import agentcore_rl_harness.gateway.trajectory as trajectory

    prompts = []
    for size in (trajectory.RENDER_CACHE_SIZE, 0):
        monkeypatch.setattr(trajectory, "RENDER_CACHE_SIZE", size)
        agent = Agent(TurnTree(renderer), renderer, im_end)
        messages, seen = [SYSTEM, {"role": "user", "content": "1+2, then +3"}], []
        for index, text in enumerate(replies):
            turn, message = agent.turn(list(messages), text, tools=tools)
            seen.append((turn.prompt_token_ids, turn.parent, turn.drift))
            follow = tool_result(message, str(index)) if message.get("tool_calls") else {"role": "user", "content": "go on"}
            messages += [message, follow]
        # an edited history (a fork) re-renders prefixes the cache has seen
        turn, _ = agent.turn(messages[:3] + [{"role": "user", "content": "edited"}], "ok", tools=tools)
        seen.append((turn.prompt_token_ids, turn.parent, turn.drift))
        prompts.append(seen)
    return prompts


def test_render_cache_gives_the_same_prompts(renderer, im_end, monkeypatch):
    cached, uncached = _cached_vs_uncached_prompts(renderer, im_end, [call(1, 2), call(3, 3), "6", "done"], monkeypatch)
    assert cached == uncached


def test_render_cache_gives_the_same_prompts_with_a_think_stripping_template(qwen3_renderer, im_end, monkeypatch):
    replies = ["<think>\nadd\n</think>\n\n3", "<think>\nmore\n</think>\n\n6", "done"]
    cached, uncached = _cached_vs_uncached_prompts(qwen3_renderer, im_end, replies, monkeypatch, tools=None)
    assert cached == uncached and any(drift for _, _, drift in cached)
