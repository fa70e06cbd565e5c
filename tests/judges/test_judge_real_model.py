"""A real model as the judge: the `tiny` model behind the rollout gateway, asked through the real
`openai` client (`roles.judge.kind=openai`), and loaded in-process (`kind=hf`). The tiny model
writes no JSON, so the strict reading must refuse its answers and end in a counted judge_error,
with the tokens the gateway served counted as the judge's usage."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentcore_rl_harness.errors import JudgeError
from agentcore_rl_harness.judges.clients import build_client, identity
from agentcore_rl_harness.judges.config import JudgeConfig
from agentcore_rl_harness.judges.service import JudgeService

pytest.importorskip("torch")


def test_the_tiny_model_behind_the_gateway_judges_through_the_openai_client(tiny_model_dir, monkeypatch, tmp_path):
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.models import load_model, load_tokenizer
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    sampler = HFLocalSampler(load_model(tiny_model_dir))
    renderer = ChatTemplateRenderer(load_tokenizer(tiny_model_dir))
    try:
        with GatewayServer(sampler=sampler, renderer=renderer, model_id="tiny",
                           sampling=SamplingParams(temperature=0.0, max_tokens=12)) as server:
            session_id = server.sessions.open()
            monkeypatch.setenv("TINY_JUDGE_KEY", session_id)
            config = JudgeConfig(kind="openai", model="tiny", base_url=server.base_url, api_key_env="TINY_JUDGE_KEY",
                                 retries=1, max_tokens=12)
            service = JudgeService(config, identity=identity(config, policy_model=None),
                                   client=lambda: build_client(config, policy=None), cache_dir=tmp_path, usage_dir=tmp_path)
            with pytest.raises(JudgeError, match=r"no usable score in 2 attempt\(s\).*malformed answer") as raised:
                asyncio.run(service.score(rubric="1 if the answer is 4", transcript="The agent answered 4."))
            finished = server.sessions.finish(session_id)
    finally:
        sampler.close()
    assert finished.turns == 2  # the malformed answer and the re-ask went to the model
    line = json.loads((tmp_path / "usage.jsonl").read_text())
    assert (line["attempts"], line["ok"]) == (2, False)
    assert (line["prompt_tokens"], line["completion_tokens"]) == (
        finished.usage.prompt_tokens, finished.usage.completion_tokens)  # what the gateway served, counted
    assert line["completion_tokens"] > 0
    assert "'" in str(raised.value)  # the model's own answer is quoted


def test_a_local_hf_judge_loads_the_model_for_itself_and_answers(tiny_model_dir):
    config = JudgeConfig(kind="hf", model=str(tiny_model_dir), max_tokens=8)
    client = build_client(config, policy=None)
    try:
        answer = asyncio.run(client.complete([{"role": "user", "content": "Score this: 4"}]))
    finally:
        asyncio.run(client.aclose())
    assert client.identity == f"hf:{tiny_model_dir}"
    assert 0 < answer.completion_tokens <= 8 and answer.prompt_tokens > 5 and isinstance(answer.text, str)
