"""integrations/verl.py and the verl exporter: dataset layout, sampler adapter, agent-loop outputs.

Checked against verl 0.9.1 from PyPI (verl/experimental/agent_loop/agent_loop.py:
`AgentLoopOutput`, `AgentLoopWorker._run_agent_loop`, `LLMServerClient.generate(request_id, *,
prompt_ids, sampling_params, ...) -> TokenOutput(token_ids, log_probs, stop_reason, extra_fields)`).
Tests that build real `AgentLoopOutput`s skip when verl is not importable.
"""

import asyncio
import json
import threading
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import yaml

from agentcore_rl_harness import cli
from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import HarnessError, SamplingError
from agentcore_rl_harness.integrations import verl as verl_loop
from agentcore_rl_harness.records import FinishReason, SamplingParams, Status

VERL_DATASET_COLUMNS = {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}


def _verl():
    return pytest.importorskip("verl.experimental.agent_loop.agent_loop", reason="verl 0.9 is not installed")


def test_export_writes_the_parquet_layout_verl_reads(toy_task_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["export", "verl", "--task", "test_toy", "--out", str(out), "--root", str(toy_task_dir),
                     "--config", str(toy_task_dir)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "verl.trainer.main_ppo" in printed and f"{out.resolve()}/agent_loop.yaml" in printed
    train = pq.read_table(out / "train.parquet").to_pylist()
    test = pq.read_table(out / "test.parquet").to_pylist()
    assert len(train) == 4 and len(test) == 2
    assert set(train[0]) == VERL_DATASET_COLUMNS
    first = train[0]
    assert first["prompt"] == [{"role": "user", "content": json.dumps({"id": "r0", "question": "Say 0",
                                                                        "split": "train"}, sort_keys=True)}]
    assert first["agent_name"] == verl_loop.AGENT_NAME and first["data_source"] == "agentcore_rl/test_toy"
    info = first["extra_info"]
    assert info["index"] == 0 and info["row_id"] == "r0" and info["task"] == "test_toy"
    assert info["task_ref"] == f"{(toy_task_dir / 'test_toy.py').resolve()}::test_toy"
    assert json.loads(info["row"])["question"] == "Say 0"
    assert first["reward_model"]["ground_truth"] == "r0"
    assert [r["extra_info"]["split"] for r in test] == ["test", "test"]
    entries = yaml.safe_load((out / "agent_loop.yaml").read_text())
    assert entries == [{"name": "agentcore_rl",
                        "_target_": "agentcore_rl_harness.integrations.verl.AgentCoreRLAgentLoop",
                        "config": str(toy_task_dir.resolve()), "overrides": []}]


def test_export_of_an_unknown_task_names_the_ones_found(toy_task_dir, tmp_path, capsys):
    code = cli.main(["export", "verl", "--task", "nope", "--out", str(tmp_path / "o"), "--root", str(toy_task_dir)])
    assert code == 2 and "tasks found: ['test_toy']" in capsys.readouterr().err


class _FakeServerManager:
    """verl's LLMServerClient.generate signature; records calls and the loop they ran on."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, prompt_ids, dict(sampling_params), asyncio.get_running_loop()))
        output = self.outputs.pop(0)
        if isinstance(output, Exception):
            raise output
        return output


def _token_output(token_ids, log_probs, stop_reason="completed", steps=3):
    return SimpleNamespace(token_ids=token_ids, log_probs=log_probs, stop_reason=stop_reason,
                           extra_fields={"global_steps": steps})


@pytest.fixture
def verl_loop_thread():
    """An event loop on another thread, standing in for verl's agent-loop worker loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_sampler_adapter_calls_verl_on_its_own_loop(verl_loop_thread):
    manager = _FakeServerManager([_token_output([7, 8, 2], [-0.1, -0.2, -0.3]),
                                  _token_output([7, 8], [-0.1, -0.2])])
    sampler = verl_loop.VerlServerSampler(manager, loop=verl_loop_thread, repetition_penalty=1.1)
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_tokens=5, stop_token_ids=(2,))
    seen = []
    result = asyncio.run(sampler.sample(prompt_token_ids=[1, 2, 3], params=params,
                                        on_token=lambda t, lp: seen.append((t, lp))))
    assert result.token_ids == (7, 8, 2) and result.logprobs == (-0.1, -0.2, -0.3)
    assert result.finish_reason is FinishReason.STOP and result.policy_version == 3
    assert seen == [(7, -0.1), (8, -0.2), (2, -0.3)]
    request_id, prompt_ids, sampling, loop = manager.calls[0]
    assert loop is verl_loop_thread and prompt_ids == [1, 2, 3] and request_id
    assert sampling == {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.1,
                        "logprobs": True, "max_tokens": 5, "stop_token_ids": [2]}
    limited = asyncio.run(sampler.sample(prompt_token_ids=[1], params=SamplingParams(max_tokens=2)))
    assert limited.finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("output, message", [
    (_token_output([5], [-1.0], stop_reason="aborted"), "aborted"),
    (_token_output([5], None), "calculate_log_probs=True"),
    (_token_output([5, 6], [-1.0]), "2 tokens but 1 logprobs"),
    (RuntimeError("ray actor died"), "generate failed: RuntimeError: ray actor died"),
])
def test_sampler_adapter_rejects_unusable_outputs(verl_loop_thread, output, message):
    sampler = verl_loop.VerlServerSampler(_FakeServerManager([output]), loop=verl_loop_thread)
    with pytest.raises(SamplingError, match=message):
        asyncio.run(sampler.sample(prompt_token_ids=[1], params=SamplingParams(max_tokens=4)))


def test_choose_trace(trace_factory):
    small = trace_factory([1], [2, 3], [1, 0])
    big = trace_factory([1], [4, 5, 6], [1, 1, 1])
    tie = trace_factory([1], [7, 8, 9], [1, 1, 1])
    empty = trace_factory([1], [9], [0])
    traces = [empty, small, big, tie]
    assert verl_loop.choose_trace(traces, "first") == (1, small)
    assert verl_loop.choose_trace(traces, "last") == (3, tie)
    assert verl_loop.choose_trace(traces, "most_trained") == (3, tie)
    with pytest.raises(HarnessError, match="no trace with a trained token"):
        verl_loop.choose_trace([empty], "last")


def test_agent_loop_output_splits_prompt_and_response(trace_factory, rollout_factory):
    module = _verl()
    main = trace_factory([1, 2, 3], [10, 11, 12, 13], [1, 0, 0, 1], logprob=-0.4)
    side = trace_factory([1, 2], [20], [1])
    rollout = rollout_factory([side, main], reward=0.5)
    output = verl_loop.agent_loop_output(rollout, trace_choice="most_trained", prompt_length=8,
                                         response_length=3)
    assert isinstance(output, module.AgentLoopOutput)
    assert output.prompt_ids == [1, 2, 3]
    assert output.response_ids == [10, 11, 12]  # cut to response_length, counted below
    assert output.response_mask == [1, 0, 0] and output.response_logprobs == [-0.4, 0.0, 0.0]
    assert output.reward_score == 0.5 and output.num_turns == 2
    info = output.extra_fields["agentcore_rl"]
    assert info["trace_index"] == 1 and info["traces_unused"] == 1 and info["unused_trained_tokens"] == 1
    assert info["truncated_response_tokens"] == 1 and info["rewards"] == {"replied": 0.5}
    as_dict = output.as_dict()  # verl's own conversion: the reward sits on the last response token
    assert as_dict["rm_scores"].tolist() == [0.0, 0.0, 0.5]
    with pytest.raises(HarnessError, match="prompt_length is 2"):
        verl_loop.agent_loop_output(rollout, trace_choice="last", prompt_length=2, response_length=8)


def test_a_failed_rollout_never_becomes_an_agent_loop_output(trace_factory, rollout_factory):
    _verl()
    failed = rollout_factory([trace_factory([1, 2], [3], [1])], reward=None, status=Status.TIMEOUT)
    with pytest.raises(HarnessError, match="cannot be a verl sample: timeout"):
        verl_loop.agent_loop_output(failed, trace_choice="last", prompt_length=8, response_length=8)


class _ScriptedRunner:
    def __init__(self, rollouts, **settings):
        self.rollouts = list(rollouts)
        self.config = SimpleNamespace(trainer=SimpleNamespace(trainer=verl_loop.VerlTrainerConfig(**settings)))
        self.cases = []

    def next_sample_index(self):
        return len(self.cases)

    async def run(self, case):
        self.cases.append(case)
        return self.rollouts.pop(0)


def _agent_loop(runner):
    trainer_config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(
        rollout=SimpleNamespace(prompt_length=16, response_length=16), model=SimpleNamespace(path="m"))))
    loop = verl_loop.AgentCoreRLAgentLoop(trainer_config=trainer_config, server_manager=None, tokenizer=None)
    loop._runner = lambda sampling_params: runner
    return loop


def _row_kwargs(toy_task_dir):
    ref = f"{(toy_task_dir / 'test_toy.py').resolve()}::test_toy"
    row = {"id": "r1", "split": "train", "question": "Say 1"}
    return {"extra_info": {"task_ref": ref, "row": json.dumps(row)}, "raw_prompt": []}


def test_failure_policy_raise_stops_the_step(toy_task_dir, rollout_factory):
    _verl()
    runner = _ScriptedRunner([rollout_factory([], reward=None, status=Status.AGENT_ERROR)])
    with pytest.raises(HarnessError, match=r"1 session\(s\) failed .*failure_policy=raise.*agent_error: boom"):
        asyncio.run(_agent_loop(runner).run({}, **_row_kwargs(toy_task_dir)))


def test_failure_policy_retry_plays_a_fresh_session(toy_task_dir, trace_factory, rollout_factory):
    _verl()
    good = rollout_factory([trace_factory([1], [2], [1])], reward=1.0, session_id="second")
    runner = _ScriptedRunner([rollout_factory([], reward=None, status=Status.TIMEOUT), good],
                             failure_policy="retry", max_attempts=2)
    output = asyncio.run(_agent_loop(runner).run({}, **_row_kwargs(toy_task_dir)))
    assert output.reward_score == 1.0 and output.extra_fields["agentcore_rl"]["failed_attempts"] == 1
    assert [c.row["id"] for c in runner.cases] == ["r1", "r1"] and runner.cases[0].spec.name == "test_toy"
    no_tokens = _ScriptedRunner([rollout_factory([], reward=1.0)] * 2, failure_policy="retry", max_attempts=2)
    with pytest.raises(HarnessError, match="never called the model"):
        asyncio.run(_agent_loop(no_tokens).run({}, **_row_kwargs(toy_task_dir)))


def test_dataset_without_our_extra_info_is_a_clear_error():
    loop = _agent_loop(_ScriptedRunner([]))
    with pytest.raises(HarnessError, match="agentcore-rl export verl"):
        asyncio.run(loop.run({}, extra_info={"index": 0}, raw_prompt=[]))


def test_trainer_verl_composes_and_validates():
    typed = compose_config(["trainer=verl", "trainer.failure_policy=retry"]).typed
    assert typed.trainer.trainer == verl_loop.VerlTrainerConfig(failure_policy="retry")
    with pytest.raises(HarnessError, match="cannot drop a sample"):
        compose_config(["trainer=verl", "trainer.failure_policy=drop"])


@pytest.mark.slow
def test_train_mode_with_trainer_verl_says_what_to_run(pytester, toy_task_dir, tiny_model_dir):
    for name in ("data.jsonl", "agent.py", "test_toy.py"):
        pytester.path.joinpath(name).write_text((toy_task_dir / name).read_text())
    result = pytester.runpytest_subprocess(
        "--agentcore-rl", "train", "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "trainer=verl",
        "--agentcore-rl-out", "run", timeout=600,
    )
    text = result.stdout.str() + result.stderr.str()
    assert result.ret != 0
    assert "trainer=verl is an external trainer" in text and "verl.trainer.main_ppo" in text


@pytest.mark.slow
def test_real_episode_becomes_an_agent_loop_output(toy_task_dir, tiny_model_dir, monkeypatch):
    """The tiny model behind a verl-shaped server manager; the real gateway, runtime and task."""
    module = _verl()
    from agentcore_rl_harness.models import load_model, load_tokenizer
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    model, tokenizer = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    hf = HFLocalSampler(model)

    class TinyServerManager:
        calls = 0

        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            TinyServerManager.calls += 1
            params = SamplingParams(temperature=sampling_params["temperature"],
                                    max_tokens=sampling_params["max_tokens"],
                                    stop_token_ids=tuple(sampling_params.get("stop_token_ids", ())))
            result = await hf.sample(prompt_token_ids=prompt_ids, params=params)
            return _token_output(list(result.token_ids), list(result.logprobs), steps=0)

    monkeypatch.setenv("AGENTCORE_RL_SET", "model=tiny sampling.max_tokens=6 runtime.concurrency=2")
    trainer_config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(
        rollout=SimpleNamespace(prompt_length=512, response_length=64), model=SimpleNamespace(path="tiny"))))
    record_dir = toy_task_dir / "records"
    loop = verl_loop.AgentCoreRLAgentLoop(
        trainer_config=trainer_config, server_manager=TinyServerManager(), tokenizer=tokenizer,
        overrides=[f"trainer.rollouts_dir={record_dir}"], name="agentcore_rl",
    )
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    async def two_samples():
        return await asyncio.gather(*(loop.run(sampling, **_row_kwargs(toy_task_dir)) for _ in range(2)))

    try:
        outputs = asyncio.run(two_samples())
    finally:
        verl_loop.close_runners()
        hf.close()
    records = [json.loads(line) for line in (record_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 2 and TinyServerManager.calls >= 2
    by_session = {r["session_id"]: r for r in records}
    for output in outputs:
        assert isinstance(output, module.AgentLoopOutput)
        record = by_session[output.extra_fields["agentcore_rl"]["session_id"]]
        trace = record["traces"][output.extra_fields["agentcore_rl"]["trace_index"]]
        assert output.prompt_ids + output.response_ids == trace["token_ids"]
        assert len(output.prompt_ids) == trace["prompt_length"]
        assert output.response_mask == trace["loss_mask"] and sum(output.response_mask) >= 1
        assert output.response_logprobs == [lp if m else 0.0 for m, lp in zip(trace["loss_mask"], trace["logprobs"])]
        assert output.reward_score == record["reward"] == 1.0
        assert record["status"] == "completed" and record["task"] == "test_toy"
