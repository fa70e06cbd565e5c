"""Chat templates the gateway tests render with, beside the bundled ones (tests/gateway)."""

# Qwen3's rule, in a compact template: an assistant turn's reasoning is rendered only while no
# user message follows it, so a new user message rewrites the earlier turn's rendering.
STRIPS_THINK = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_user and m['reasoning_content'] -%}{{- '<think>\\n' + m['reasoning_content'] + '\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- m['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
