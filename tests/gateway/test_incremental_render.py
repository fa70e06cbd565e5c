"""Incremental prompts (render and tokenise only what a turn adds) give exactly the token ids of a
full render, turn after turn, for the bundled templates and for templates that defeat windows."""

from __future__ import annotations

import json

import pytest
from chat_templates import STRIPS_THINK

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
from agentcore_rl_harness.gateway.trajectory import TurnTree
from agentcore_rl_harness.records import FinishReason, SampleResult

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]

SMOLLM2_SHIPPED = (  # SmolLM2-135M-Instruct's own template (plain ChatML, no tools)
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Numbers the user's messages: a new message's text depends on its position, which no window knows
# (the replies render as sampled, so only the second window can tell).
NUMBERED = (
    "{%- for m in messages -%}{%- if m['role'] == 'assistant' -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + ' #' + (loop.index | string) + '\\n' -}}{%- endif -%}"
    "{{- m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _script(turns, *, tools, think):
    """The replies and what follows each: tool calls and their ~60-token outputs, text replies and
    user follow-ups, reasoning where the template has it, a retried request and an edited one."""
    for index in range(turns):
        if tools and index % 3 != 2:
            yield "call", f'<tool_call>\n{{"name": "shell", "arguments": {{"cmd": "make step{index}"}}}}\n</tool_call>'
        elif think and index % 4 == 1:
            yield "text", f"<think>\nstep {index} needs care\n</think>\n\nDone with step {index}."
        else:
            yield "text", f"Step {index} is done; what next?"


class Driver:
    """Plays the sampler and the client against one tree."""

    def __init__(self, renderer, tree):
        self.renderer, self.tree = renderer, tree

    def turn(self, messages, reply_text, tools):
        plan = self.tree.plan(messages, tools)
        ids = (*self.renderer.encode(reply_text), self.renderer.stop_token_ids[0])
        sample = SampleResult(ids, tuple(-0.01 * (i + 1) for i in range(len(ids))), FinishReason.STOP)
        reply = self.renderer.parse_reply(reply_text)
        turn = self.tree.record(plan, sample, reply)
        message = {"role": "assistant", "content": reply.content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [{"id": f"call_{turn.index}", "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments)}} for c in reply.tool_calls]
        return turn, message


def _session(renderer, *, incremental, turns=40, tools=TOOLS, think=False):
    """Every turn's (prompt ids, parent, drift, fork), the traces, and the full renders it took."""
    tree = TurnTree(renderer, incremental=incremental)
    full_renders = []
    extend = tree._extend
    tree._extend = lambda *args: full_renders.append(1) or extend(*args)
    driver = Driver(renderer, tree)
    messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "Fix the build."}]
    seen = []
    for index, (kind, text) in enumerate(_script(turns, tools=tools, think=think)):
        turn, message = driver.turn(list(messages), text, tools)
        seen.append((turn.prompt_token_ids, turn.parent, turn.drift, turn.fork))
        if index == turns // 2:  # the client retries the same request: a sibling of this turn
            retry, _ = driver.turn(list(messages), text, tools)
            seen.append((retry.prompt_token_ids, retry.parent, retry.drift, retry.fork))
        if kind == "call":
            output = "\n".join(f"[{index}.{line}] cc -c module_{line}.c ok" for line in range(6))
            follow = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": output}
        else:
            follow = {"role": "user", "content": f"Continue after step {index}."}
        messages += [message, follow]
    edited, _ = driver.turn([*messages[:5], {"role": "user", "content": "start over"}], "ok", tools)
    seen.append((edited.prompt_token_ids, edited.parent, edited.drift, edited.fork))
    return seen, tree.traces(), len(full_renders)


@pytest.fixture(scope="module")
def templates(smol_tokenizer):
    return {
        "chatml_tools (bundled)": ChatTemplateRenderer(smol_tokenizer, chat_template=load_template()),
        "tiny model's own": ChatTemplateRenderer(smol_tokenizer),
        "smollm2 shipped": ChatTemplateRenderer(smol_tokenizer, chat_template=SMOLLM2_SHIPPED),
        "qwen3-style think stripping": ChatTemplateRenderer(smol_tokenizer, chat_template=STRIPS_THINK),
        "numbered messages": ChatTemplateRenderer(smol_tokenizer, chat_template=NUMBERED),
    }


@pytest.mark.parametrize("name, tools, think, windowed", [
    ("chatml_tools (bundled)", TOOLS, False, True),
    ("tiny model's own", TOOLS, False, True),
    ("smollm2 shipped", None, False, True),
    ("qwen3-style think stripping", None, True, True),
    ("numbered messages", None, False, False),
])
def test_incremental_prompts_are_the_full_render_token_for_token(templates, name, tools, think, windowed):
    renderer = templates[name]
    incremental, traces, full_renders = _session(renderer, incremental=True, tools=tools, think=think)
    reference, reference_traces, reference_full = _session(renderer, incremental=False, tools=tools, think=think)
    assert len(incremental) == 42
    for index, (got, want) in enumerate(zip(incremental, reference, strict=True)):
        assert got == want, f"{name}: turn {index} differs"
    assert traces == reference_traces
    if windowed:  # the window did the work: full renders only for the short first turns and drift
        drifted = sum(drift for _, _, drift, _ in reference)
        assert full_renders <= 3 + drifted < reference_full
    else:  # the windows disagree on every extending turn: each took the full render
        assert full_renders == reference_full


def test_history_is_found_again_when_the_client_reformats_it(templates):
    """A client that re-sends the history in another shape (content parts instead of strings)
    still extends its row: the normalised comparison takes over from the as-sent one."""
    renderer = templates["chatml_tools (bundled)"]
    driver = Driver(renderer, TurnTree(renderer))
    messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "Fix it."}]
    for step in range(6):
        turn, message = driver.turn(list(messages), f"step {step}", None)
        messages += [message, {"role": "user", "content": [{"type": "text", "text": f"next {step}"}]}]
        messages = [{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str)
                    and step % 2 else m for m in messages]
        assert turn.parent == (None if step == 0 else turn.index - 1) and not turn.fork


def test_a_chain_holds_its_history_once(templates):
    """Turns that extend one another view one buffer of messages, keys and prompt ids (a
    4096-turn session would otherwise hold turns x history of each)."""
    renderer = templates["chatml_tools (bundled)"]
    driver = Driver(renderer, TurnTree(renderer))
    messages = [{"role": "system", "content": "You fix builds."}, {"role": "user", "content": "Fix it."}]
    turns = []
    for step in range(12):
        turn, message = driver.turn(list(messages), f"step {step}", None)
        turns.append(turn)
        messages += [message, {"role": "user", "content": f"next {step}"}]
    for name in ("messages", "history_keys", "prompt_token_ids"):
        buffers = {id(getattr(turn, name)._buffer) for turn in turns[1:]}
        assert len(buffers) == 1, name
    assert len(turns[-1].messages) == 24 and turns[-1].messages[-1]["content"] == "next 10"
