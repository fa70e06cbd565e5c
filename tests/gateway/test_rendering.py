"""The tool-aware ChatML template and `ChatTemplateRenderer` with the real SmolLM2 tokenizer."""

from __future__ import annotations

import json

import pytest

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from agentcore_rl_harness.errors import RenderError
from agentcore_rl_harness.gateway.rendering import (
    SUPPORTED_TRANSFORMERS,
    ChatTemplateRenderer,
    ParsedReply,
    Renderer,
    ToolCall,
    check_transformers_version,
    load_template,
    message_key,
    normalize_message,
)
from agentcore_rl_harness.gateway.tool_formats import detect_tool_format

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


# --- Model families -------------------------------------------------------------------------
# Small Jinja templates that write what each family's real template writes (markers, tool-call
# syntax, turn tokens), rendered with the SmolLM2 tokenizer plus the family's special tokens.

QWEN3_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' + (messages[0]['content'] + '\\n\\n' if messages[0]['role'] == 'system' else '') -}}"
    "{{- '# Tools\\n\\n<tools>' -}}{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call> XML tags:\\n'"
    " + '<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages[0]['role'] == 'system' -%}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_user and m['reasoning_content'] -%}{{- '<think>\\n' + m['reasoning_content'] + '\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- m['content'] -}}"
    "{%- for call in m['tool_calls'] or [] -%}"
    "{%- if m['content'] or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' + (call['function']['arguments'] | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}{{- '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

QWEN_XML_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\nYou have access to the following functions:\\n\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n<function>\\n<name>' + tool['function']['name'] + '</name>\\n</function>' -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format:\\n<tool_call>\\n'"
    " + '<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n</function>\\n</tool_call><|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + m['content'] -}}"
    "{%- for call in m['tool_calls'] or [] -%}"
    "{{- '\\n<tool_call>\\n<function=' + call['function']['name'] + '>\\n' -}}"
    "{%- for name, value in call['function']['arguments'] | items -%}"
    "{{- '<parameter=' + name + '>\\n' + (value if value is string else value | tojson) + '\\n</parameter>\\n' -}}"
    "{%- endfor -%}{{- '</function>\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}{{- '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

LLAMA31_TEMPLATE = (
    "{{- '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\n' -}}"
    "{%- if tools -%}{{- 'Environment: ipython\\n' -}}{%- endif -%}"
    "{{- (messages[0]['content'] if messages[0]['role'] == 'system' else '') + '<|eot_id|>' -}}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}"
    "{%- elif m['role'] == 'user' and tools and loop.first or (m['role'] == 'user' and tools and loop.index0 == 1 and messages[0]['role'] == 'system') -%}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON for a function call. '"
    " + 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.\\n\\n' -}}"
    "{%- for tool in tools -%}{{- (tool | tojson) + '\\n\\n' -}}{%- endfor -%}{{- m['content'] + '<|eot_id|>' -}}"
    "{%- elif m['role'] == 'assistant' and m['tool_calls'] -%}"
    "{%- set call = m['tool_calls'][0]['function'] -%}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{\"name\": \"' + call['name'] + '\", \"parameters\": ' + (call['arguments'] | tojson) + '}<|eot_id|>' -}}"
    "{%- elif m['role'] in ('tool', 'ipython') -%}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' -}}"
    "{%- else -%}{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

FAMILY_TOKENS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                 "<|python_tag|>"]


@pytest.fixture(scope="module")
def family_tokenizer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)  # a private copy: the session tokenizer stays untouched
    tokenizer.add_special_tokens({"additional_special_tokens": FAMILY_TOKENS})
    return tokenizer


@pytest.mark.parametrize("template, expected", [
    (load_template(), "hermes"),
    (QWEN3_TEMPLATE, "hermes"),
    (QWEN_XML_TEMPLATE, "qwen_xml"),
    (LLAMA31_TEMPLATE, "llama_json"),
    ("{{ '<|python_tag|>' }}{% for t in tools %}{{ t | tojson }}{% endfor %}", "llama_json"),
    ("{% for m in messages %}{{ m['content'] }}{% endfor %}", None),
    ("{{ 'ipython' }}", None),  # a role name alone is not a call format
])
def test_tool_format_is_detected_from_template_content(template, expected):
    detected = detect_tool_format(template)
    assert (detected.name if detected else None) == expected


def test_qwen3_family_renders_and_parses_json_calls_with_reasoning(family_tokenizer):
    renderer = ChatTemplateRenderer(family_tokenizer, chat_template=QWEN3_TEMPLATE)
    assert renderer.tool_format.name == "hermes" and renderer.end_of_turn == "<|im_end|>"
    text = renderer.render([{"role": "user", "content": "1+2"}], tools=[ADD_TOOL])
    assert "<tools>\n" + json.dumps(ADD_TOOL) in text and text.endswith("<|im_start|>assistant\n")
    reply = renderer.parse_reply('<think>\nadd them\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    assert reply == ParsedReply(content="", reasoning="add them", tool_calls=(ToolCall("add", {"a": 1, "b": 2}),))
    # The template keeps reasoning of the turn after the last user message and drops it after a new one.
    history = [{"role": "user", "content": "1+2"}, {**reply.to_message()}]
    assert "<think>\nadd them\n</think>" in renderer.render(history, tools=[ADD_TOOL], add_generation_prompt=False)
    later = renderer.render([*history, {"role": "user", "content": "again"}], tools=[ADD_TOOL])
    assert "<think>" not in later


def test_qwen_xml_family_renders_and_parses_function_blocks(family_tokenizer):
    renderer = ChatTemplateRenderer(family_tokenizer, chat_template=QWEN_XML_TEMPLATE)
    assert renderer.tool_format.name == "qwen_xml"
    sampled = ("Adding.\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2\n</parameter>\n"
               "</function>\n</tool_call>\n<tool_call>\n<function=note>\n<parameter=text>\n42\n</parameter>\n"
               "<parameter=tags>\n[\"x\"]\n</parameter>\n</function>\n</tool_call>")
    note = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}, "tags": {"type": "array"}}}}}
    reply = renderer.parse_reply(sampled, tools=[ADD_TOOL, note])
    assert reply == ParsedReply(content="Adding.", tool_calls=(
        ToolCall("add", {"a": 1, "b": 2}), ToolCall("note", {"text": "42", "tags": ["x"]})))
    assert renderer.parse_reply(sampled).tool_calls[1].arguments["text"] == 42  # no schema: JSON if it parses
    rendered = renderer.render([{"role": "user", "content": "go"}, reply.to_message()], tools=[ADD_TOOL, note],
                               add_generation_prompt=False)
    assert rendered.endswith("<|im_start|>assistant\n" + sampled + "<|im_end|>\n")


def test_llama31_family_renders_and_parses_json_calls(family_tokenizer):
    renderer = ChatTemplateRenderer(family_tokenizer, chat_template=LLAMA31_TEMPLATE)
    assert renderer.tool_format.name == "llama_json" and renderer.end_of_turn == "<|eot_id|>"
    ids = family_tokenizer.convert_tokens_to_ids
    assert renderer.stop_token_ids == (ids("<|eot_id|>"), family_tokenizer.eos_token_id)
    with_eom = ChatTemplateRenderer(family_tokenizer, chat_template=LLAMA31_TEMPLATE + "{{- '<|eom_id|>' if false -}}")
    assert with_eom.stop_token_ids == (ids("<|eot_id|>"), ids("<|eom_id|>"), family_tokenizer.eos_token_id)
    text = renderer.render([{"role": "system", "content": "Be exact."}, {"role": "user", "content": "1+2"}], tools=[ADD_TOOL])
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nBe exact.<|eot_id|>")
    assert text.endswith("1+2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert renderer.parse_reply('{"name": "add", "parameters": {"a": 1, "b": 2}}') == ParsedReply(
        content="", tool_calls=(ToolCall("add", {"a": 1, "b": 2}),))
    assert renderer.parse_reply('<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "add", "arguments": {"a": 2}}') \
        == ParsedReply(content="", tool_calls=(ToolCall("add", {"a": 1}), ToolCall("add", {"a": 2})))
    assert renderer.parse_reply("The answer is 3.") == ParsedReply(content="The answer is 3.")
    tool_turn = renderer.render([{"role": "user", "content": "1+2"},
                                 {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}]},
                                 {"role": "tool", "content": "3"}], tools=[ADD_TOOL])
    assert tool_turn.endswith('{"name": "add", "parameters": {"a": 1}}<|eot_id|>'
                              "<|start_header_id|>ipython<|end_header_id|>\n\n3<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize("template, text", [
    (QWEN3_TEMPLATE, '<tool_call>\n{"name": "add", "arguments": {"a": 1\n</tool_call>'),
    (QWEN3_TEMPLATE, 'Let me.\n<tool_call>\n{"name": "add", "arguments": {}}'),
    (QWEN3_TEMPLATE, '<tool_call>\n["add"]\n</tool_call>'),
    (QWEN_XML_TEMPLATE, "<tool_call>\n<function=add>\n<parameter=a>\n1\n</function>\n</tool_call>"),
    (QWEN_XML_TEMPLATE, "<tool_call>\n{\"name\": \"add\"}\n</tool_call>"),
    (QWEN_XML_TEMPLATE, "<tool_call>\n<function=add>\n</function>\n</tool_call> trailing <tool_call>"),
    (LLAMA31_TEMPLATE, '{"name": "add", "parameters": {"a": 1}'),
    (LLAMA31_TEMPLATE, '<|python_tag|>brave_search.call(query="x")'),
    (LLAMA31_TEMPLATE, '{"name": "add", "parameters": [1, 2]}'),
])
def test_malformed_calls_degrade_to_text_for_every_family(family_tokenizer, template, text):
    reply = ChatTemplateRenderer(family_tokenizer, chat_template=template).parse_reply(text)
    assert reply == ParsedReply(content=text, ill_formed=True)


def test_reasoning_opened_by_the_generation_prompt(renderer):
    assert renderer.parse_reply("weighing it\n</think>\n\n4") == ParsedReply(content="4", reasoning="weighing it")


def test_reasoning_round_trips_through_normalisation_but_not_the_equality_key():
    sent = normalize_message({"role": "assistant", "content": "4", "reasoning_content": "2+2"})
    assert sent == {"role": "assistant", "content": "4", "reasoning_content": "2+2"}
    assert message_key(sent) == message_key({"role": "assistant", "content": "4"})
    assert "reasoning_content" not in normalize_message({"role": "user", "content": "x", "reasoning_content": "y"})


def test_transformers_version_range_is_pinned_and_checked():
    import transformers

    assert SUPPORTED_TRANSFORMERS == ">=5.0,<6"
    check_transformers_version()  # the installed one
    assert Version(transformers.__version__) in SpecifierSet(SUPPORTED_TRANSFORMERS)
    check_transformers_version("5.24.0")
    for outside in ("4.57.1", "6.0.0"):
        with pytest.raises(RenderError, match=rf"transformers {outside} is outside .*pip install"):
            check_transformers_version(outside)


REASONED = {"role": "assistant", "content": "3", "reasoning_content": "add them"}
CALLED = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"b": 2, "a": 1}'}}]}
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "1+2"}, REASONED,
     {"role": "user", "content": [{"type": "text", "text": "again "}, {"type": "text", "text": "please"}]}],
    [{"role": "developer", "content": "d"}, {"role": "user", "content": "1+2"}, CALLED,
     {"role": "tool", "tool_call_id": "c1", "content": "3"}],
]


@pytest.mark.parametrize("template_name", ["smol", "qwen3", "qwen_xml", "llama31"])
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_direct_render_equals_apply_chat_template(template_name, conversation, smol_tokenizer, family_tokenizer):
    """The renderer's direct jinja path gives the text of `apply_chat_template(tokenize=False)`."""
    from agentcore_rl_harness.gateway.rendering import normalize_messages

    tokenizer, template = {
        "smol": (smol_tokenizer, load_template()), "qwen3": (family_tokenizer, QWEN3_TEMPLATE),
        "qwen_xml": (family_tokenizer, QWEN_XML_TEMPLATE), "llama31": (family_tokenizer, LLAMA31_TEMPLATE),
    }[template_name]
    renderer = ChatTemplateRenderer(tokenizer, chat_template=template)
    assert renderer._jinja is not None
    for tools in (None, [ADD_TOOL]):
        for prompt in (True, False):
            expected = tokenizer.apply_chat_template(
                normalize_messages(conversation), tools=tools, chat_template=template,
                add_generation_prompt=prompt, tokenize=False)
            assert renderer.render(conversation, tools=tools, add_generation_prompt=prompt) == expected


def test_encode_cache_gives_the_tokenizer_ids(renderer, smol_tokenizer):
    texts = ["\n<|im_start|>user\nAnd again?<|im_end|>\n<|im_start|>assistant\n", "", " x  y", "héllo 😀\t"]
    for _ in range(2):  # the second round is served from the cache
        for text in texts:
            ids = renderer.encode(text)
            assert ids == list(smol_tokenizer.encode(text, add_special_tokens=False))
            ids.append(-1)  # callers get their own list
    assert renderer.encode("x" * 20000) == list(smol_tokenizer.encode("x" * 20000, add_special_tokens=False))
