"""The tool-aware ChatML template and `ChatTemplateRenderer` with the real SmolLM2 tokenizer."""

from __future__ import annotations

import json

import pytest

from agentcore_rl_harness.errors import RenderError
from agentcore_rl_harness.gateway.rendering import (
    ChatTemplateRenderer,
    ParsedReply,
    Renderer,
    ToolCall,
    message_key,
    normalize_message,
)

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
ADD_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
}}


def test_renderer_satisfies_protocol_and_stops_on_im_end(renderer, im_end, smol_tokenizer):
    assert isinstance(renderer, Renderer)
    assert renderer.stop_token_ids[0] == im_end
    assert smol_tokenizer.eos_token_id in renderer.stop_token_ids
    assert renderer.end_of_turn == "<|im_end|>"
    assert renderer.supports_tools


def test_plain_chat_matches_smollm2_shipped_template(renderer, smol_tokenizer):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "2+2?"}]
    shipped = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
               "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    expected = smol_tokenizer.apply_chat_template(messages, chat_template=shipped, tokenize=False,
                                                  add_generation_prompt=True)
    assert renderer.render(messages) == expected
    assert expected.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
    assert expected.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_tools_listed_in_system_prompt_with_call_format(renderer):
    text = renderer.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2"}],
                           tools=[ADD_TOOL])
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call these tools:\n<tools>\n")
    assert json.dumps(ADD_TOOL["function"]) + "\n</tools>" in text
    assert '<tool_call>\n{"name": "tool name", "arguments": {"argument name": "value"}}\n</tool_call><|im_end|>' in text
    assert text.endswith("<|im_start|>user\n1+2<|im_end|>\n<|im_start|>assistant\n")


def test_assistant_tool_calls_and_tool_results(renderer):
    messages = [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": "Sure.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "tool", "tool_call_id": "c2", "content": "7"},
    ]
    text = renderer.render(messages, tools=[ADD_TOOL], add_generation_prompt=False)
    assert text.endswith(
        "<|im_start|>assistant\nSure.\n"
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n"
    )
    no_content = renderer.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": None,
                                  "tool_calls": [{"function": {"name": "add", "arguments": "{}"}}]}],
                                 tools=[ADD_TOOL], add_generation_prompt=False)
    assert no_content.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call><|im_end|>\n')


def test_normalisation_of_openai_shapes():
    message = normalize_message({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                                 "tool_calls": [{"id": "x", "type": "function",
                                                 "function": {"name": "f", "arguments": '{"b": 1, "a": [2]}'}}]})
    assert message == {"role": "assistant", "content": "ab",
                       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [2]}}}]}
    same = normalize_message({"role": "assistant", "content": "ab", "tool_calls": [
        {"function": {"name": "f", "arguments": {"a": [2], "b": 1}}}]})
    assert message_key(message) == message_key(same)
    assert normalize_message({"role": "developer", "content": None}) == {"role": "system", "content": ""}
    with pytest.raises(RenderError, match="image_url"):
        normalize_message({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})


@pytest.mark.parametrize("text, expected", [
    ("The answer is 4.", ParsedReply(content="The answer is 4.")),
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
     ParsedReply(content="", tool_calls=(ToolCall("add", {"a": 1, "b": 2}),))),
    ('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
     '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 2}"}\n</tool_call>',
     ParsedReply(content="Let me add.", tool_calls=(ToolCall("add", {"a": 1}), ToolCall("add", {"a": 2})))),
    ("<think>2 plus 2</think>\n4", ParsedReply(content="4", reasoning="2 plus 2")),
    ("<think>unfinished", ParsedReply(content="", reasoning="unfinished")),
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1\n</tool_call>',
     ParsedReply(content='<tool_call>\n{"name": "add", "arguments": {"a": 1\n</tool_call>', ill_formed=True)),
    ('<tool_call>{"arguments": {}}</tool_call>',
     ParsedReply(content='<tool_call>{"arguments": {}}</tool_call>', ill_formed=True)),
    ('<tool_call>\n{"name": "add"', ParsedReply(content='<tool_call>\n{"name": "add"', ill_formed=True)),
])
def test_parse_reply(renderer, text, expected):
    assert renderer.parse_reply(text) == expected


def test_template_without_tool_format_rejects_tools_at_first_request(smol_tokenizer):
    plain = ChatTemplateRenderer(smol_tokenizer, chat_template=(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"))
    assert not plain.supports_tools
    assert plain.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n"
    with pytest.raises(RenderError, match="no known tool format"):
        plain.render([{"role": "user", "content": "hi"}], tools=[ADD_TOOL])
    assert plain.parse_reply('<tool_call>{"name": "x"}</tool_call>').tool_calls == ()


def test_encode_decode_round_trip_keeps_special_tokens(renderer, im_end):
    ids = renderer.encode("hello<|im_end|>")
    assert ids[-1] == im_end
    assert renderer.decode(ids) == "hello<|im_end|>"
    messages = [{"role": "user", "content": "hi"}]
    assert renderer.render_ids(messages) == renderer.encode(renderer.render(messages))
