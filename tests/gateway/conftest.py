"""Fixtures for gateway tests: the real SmolLM2 tokenizer with the packaged tool template."""

from __future__ import annotations

import pytest

from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template


@pytest.fixture(scope="session")
def smol_tokenizer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="session")
def renderer(smol_tokenizer):
    return ChatTemplateRenderer(smol_tokenizer, chat_template=load_template())


@pytest.fixture(scope="session")
def im_end(smol_tokenizer):
    return smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
