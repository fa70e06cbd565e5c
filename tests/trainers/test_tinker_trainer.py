"""`trainer=tinker`: conversion to real tinker types, config checks, steps and checkpoints against a
fake service, then the adapter end to end against the local Tinker-compatible server."""

from __future__ import annotations

import asyncio
import json
import math
import os

import pytest
from toy_project import even_length_task, rows, write_project

tinker = pytest.importorskip("tinker")
os.environ.setdefault("TINKER_TELEMETRY", "0")

from agentcore_rl_harness.config import compose_config  # noqa: E402
from agentcore_rl_harness.errors import ConfigError  # noqa: E402
from agentcore_rl_harness.records import Trace  # noqa: E402
from agentcore_rl_harness.trainers.base import TrainGroup, TrainSample  # noqa: E402
from agentcore_rl_harness.trainers.checkpoint import CheckpointError  # noqa: E402
from agentcore_rl_harness.trainers.datum import token_data  # noqa: E402
from agentcore_rl_harness.trainers.grpo import GRPOConfig, build_batch  # noqa: E402
from agentcore_rl_harness.trainers.registry import spec_for  # noqa: E402
from agentcore_rl_harness.trainers.tinker import (  # noqa: E402
    CHECKPOINT_FILE,
    TinkerTrainer,
    TinkerTrainerConfig,
    advantage_scale,
    check_algo,
    logprob_stats,
    loss_fn_config,
    to_tinker_datum,
)


def _trace(prompt, completion, logprobs, mask=None, version=0):
    return Trace(
        token_ids=tuple(prompt) + tuple(completion),
        prompt_length=len(prompt),
        loss_mask=tuple(mask or (1,) * len(completion)),
        logprobs=tuple(logprobs),
        finish_reason="stop",
        metadata={"policy_versions": [version]},
    )


def _groups():
    good = _trace([5, 6, 7], [8, 9, 10], [-0.5, -0.25, None], mask=(1, 1, 0))
    bad = _trace([5, 6, 7], [11, 12], [-0.1, -0.2])
    return [TrainGroup("g", (TrainSample("a", 1.0, (good,)), TrainSample("b", 0.0, (bad,))))]


def _data():
    items, _ = build_batch(_groups(), normalize_std=True)
    return token_data(items)


def test_datum_becomes_a_real_tinker_datum_with_zero_advantage_off_the_mask():
    first = _data()[0]
    datum = to_tinker_datum(tinker, first, scale=0.5)
    assert isinstance(datum, tinker.Datum)
    assert datum.model_input.to_ints() == [5, 6, 7, 8, 9]
    inputs = datum.loss_fn_inputs
    assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].tolist() == [6, 7, 8, 9, 10]
    assert inputs["logprobs"].dtype == "float32"
    assert inputs["logprobs"].tolist() == pytest.approx([0.0, 0.0, -0.5, -0.25, 0.0])
    advantage = first.advantage * 0.5
    assert inputs["advantages"].tolist() == pytest.approx([0.0, 0.0, advantage, advantage, 0.0], rel=1e-6)
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}


def test_advantage_scale_turns_the_summed_loss_into_the_configured_aggregation():
    data = _data()  # 2 and 2 trained tokens
    assert advantage_scale(data[0], aggregation="token_mean", total_tokens=4, sequences=2) == 0.25
    assert advantage_scale(data[0], aggregation="seq_mean_token_mean", total_tokens=4, sequences=2) == 0.25
    assert advantage_scale(data[0], aggregation="seq_mean_token_sum", total_tokens=4, sequences=2) == 0.5


def test_loss_fn_config_maps_the_algo_clip_settings_to_tinker_thresholds():
    ppo = TinkerTrainerConfig()
    assert loss_fn_config(ppo, GRPOConfig(clip_low=0.2, clip_high=0.28)) == pytest.approx(
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28})
    cispo = TinkerTrainerConfig(loss_fn="cispo")
    assert loss_fn_config(cispo, GRPOConfig(tis_cap=2.0)) == {"clip_low_threshold": 0.0, "clip_high_threshold": 2.0}
    assert loss_fn_config(TinkerTrainerConfig(loss_fn="importance_sampling"), GRPOConfig()) is None


@pytest.mark.parametrize(("config", "algo", "message"), [
    (TinkerTrainerConfig(), GRPOConfig(kl_coef=0.1), "set algo.kl_coef=0"),
    (TinkerTrainerConfig(), GRPOConfig(tis_cap=2.0), "set trainer.loss_fn=cispo"),
    (TinkerTrainerConfig(loss_fn="cispo"), GRPOConfig(), "set algo.tis_cap"),
])
def test_settings_the_service_cannot_honour_are_rejected_with_the_fix(config, algo, message):
    with pytest.raises(ConfigError, match=message):
        check_algo(config, algo)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("loss_fn", "dro", "valid choices"),
    ("lr", 0.0, "trainer.lr=0.0"),
    ("adam_beta2", 1.0, "adam_beta2=1.0"),
    ("max_grad_norm", 0.0, "max_grad_norm=0.0"),
])
def test_config_validation(field, value, message):
    with pytest.raises(ConfigError, match=message):
        TinkerTrainerConfig(**{field: value})


def test_trainer_tinker_composes_from_overrides_and_keeps_keys_out_of_the_config():
    composed = compose_config(["trainer=tinker", "trainer.base_url=http://127.0.0.1:9", "trainer.lr=1e-5"])
    section = composed.typed.trainer
    assert isinstance(section.trainer, TinkerTrainerConfig)
    assert section.trainer.base_url == "http://127.0.0.1:9" and section.trainer.lr == 1e-5
    assert section.loop.steps >= 1 and spec_for("tinker").kind == "service"
    assert "api_key" not in composed.resolved["trainer"]
    with pytest.raises(ConfigError, match="unknown config key"):
        compose_config(["trainer=tinker", "+trainer.api_key=tml-secret"])


def test_logprob_stats_are_the_k3_kl_and_clip_fraction_on_trained_tokens():
    data = _data()
    same = [list(datum.logprobs) for datum in data]
    assert logprob_stats(data, same, loss_fn="ppo", clip_low=0.2, clip_high=0.2, tis_cap=None).sampler_kl == 0.0
    moved = [[value + (0.5 if mask else 0.0) for value, mask in zip(datum.logprobs, datum.mask)] for datum in data]
    stats = logprob_stats(data, moved, loss_fn="ppo", clip_low=0.2, clip_high=0.2, tis_cap=None)
    assert stats.sampler_kl == pytest.approx(math.exp(-0.5) + 0.5 - 1.0)
    # ratio e^0.5 = 1.65 > 1.2: clipped for the positive advantage, not for the negative one
    assert stats.clip_fraction == pytest.approx(0.5)
    assert logprob_stats(data, None, loss_fn="ppo", clip_low=0.2, clip_high=0.2, tis_cap=None).sampler_kl is None
    assert logprob_stats(data, moved, loss_fn="importance_sampling", clip_low=0.2, clip_high=0.2,
                         tis_cap=None).clip_fraction is None


class Done:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class FakeSamplingClient:
    def __init__(self, name):
        self.name = name


class FakeTrainingClient:
    """Answers like tinker's TrainingClient, with real `tinker` result types."""

    def __init__(self, log):
        self.log = log
        self.snapshots = 0

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        self.log.append(("forward_backward", data, loss_fn, loss_fn_config))
        outputs = [{"logprobs": tinker.TensorData(data=[lp + 0.1 for lp in d.loss_fn_inputs["logprobs"].tolist()],
                                                  dtype="float32")} for d in data]
        return Done(tinker.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs,
                                                 metrics={"loss:sum": -0.75}))

    def optim_step(self, params):
        self.log.append(("optim_step", params))
        return Done(tinker.OptimStepResponse(metrics=None))

    def save_weights_and_get_sampling_client(self):
        self.snapshots += 1
        return Done(FakeSamplingClient(f"snapshot-{self.snapshots}"))

    def save_state(self, name):
        self.log.append(("save_state", name))
        return Done(tinker.types.SaveWeightsResponse(path=f"tinker://run-1/weights/{name}"))


class FakeService:
    def __init__(self):
        self.log = []
        self.closed = []

    def create_lora_training_client(self, *, base_model, rank, seed):
        self.log.append(("create", base_model, rank, seed))
        return Done(FakeTrainingClient(self.log))

    def create_training_client_from_state_with_optimizer(self, path):
        self.log.append(("restore", path))
        return Done(FakeTrainingClient(self.log))

    def close(self, status):
        self.closed.append(status)
        return Done(None)


def _fake_trainer(**config):
    service = FakeService()
    trainer = TinkerTrainer(config=TinkerTrainerConfig(**config), algo=GRPOConfig(), base_model="tiny",
                            service_client=service)
    return trainer, service


def test_step_sends_datums_then_optimizer_then_swaps_the_sampler_to_new_weights():
    trainer, service = _fake_trainer(lr=1e-5, max_grad_norm=None)
    assert trainer.sampler.sampling_client.name == "snapshot-1" and trainer.policy_version == 0
    metrics = asyncio.run(trainer.step(groups=_groups()))
    kinds = [entry[0] for entry in service.log]
    assert kinds == ["create", "forward_backward", "optim_step"]
    _, data, loss_fn, config = service.log[1]
    assert loss_fn == "ppo" and config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.28})
    assert len(data) == 2 and all(isinstance(datum, tinker.Datum) for datum in data)
    # token_mean: every trained token's advantage divided by the 4 trained tokens
    assert data[0].loss_fn_inputs["advantages"].tolist()[2] == pytest.approx(1.0 / 4, rel=1e-5)
    params = service.log[2][1]
    assert isinstance(params, tinker.AdamParams) and params.learning_rate == 1e-5 and params.grad_clip_norm == 0.0
    assert trainer.policy_version == 1 and metrics.policy_version == 1
    assert trainer.sampler.sampling_client.name == "snapshot-2" and trainer.sampler.policy_version == 1
    assert metrics.loss == -0.75 and metrics.kl is None and metrics.grad_norm is None
    assert metrics.trained_tokens == 4 and metrics.sequences == 2 and metrics.groups == 1
    # the fake's policy logprobs are the sampler's + 0.1 on every token
    assert metrics.sampler_kl == pytest.approx(math.exp(-0.1) + 0.1 - 1.0)
    assert metrics.staleness_max == 0


def test_a_step_with_nothing_to_train_leaves_the_service_and_version_alone():
    trainer, service = _fake_trainer()
    constant = [TrainGroup("g", (TrainSample("a", 1.0, (_trace([1, 2], [3], [-0.1]),)),
                                 TrainSample("b", 1.0, (_trace([1, 2], [4], [-0.2]),))))]
    metrics = asyncio.run(trainer.step(groups=constant))
    assert [entry[0] for entry in service.log] == ["create"]
    assert metrics.policy_version == 0 and metrics.loss is None and metrics.groups_skipped == 1
    assert metrics.step == 1 and trainer.sampler.sampling_client.name == "snapshot-1"


def test_checkpoint_records_the_tinker_path_and_restores_step_and_version(tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tml-secret-value")
    trainer, service = _fake_trainer()
    asyncio.run(trainer.step(groups=_groups()))
    folder = tmp_path / "checkpoints" / "step-00001"
    trainer.save_checkpoint(folder)
    text = (folder / CHECKPOINT_FILE).read_text()
    record = json.loads(text)
    assert record["tinker_path"] == "tinker://run-1/weights/arl-step-00001-v1"
    assert (record["step"], record["policy_version"], record["base_model"]) == (1, 1, "tiny")
    assert "tml-secret-value" not in text

    fresh, fresh_service = _fake_trainer()
    assert fresh.load_checkpoint(folder) == 1
    assert ("restore", "tinker://run-1/weights/arl-step-00001-v1") in fresh_service.log
    assert fresh.policy_version == 1 and fresh.sampler.policy_version == 1 and fresh.step_count == 1
    assert fresh.sampler.sampling_client.name == "snapshot-1"  # from the restored training client

    other, _ = _fake_trainer(lora_rank=8)
    with pytest.raises(CheckpointError, match="trainer.lora_rank"):
        other.load_checkpoint(folder)
    (folder / CHECKPOINT_FILE).write_text("{}")
    with pytest.raises(CheckpointError, match="not a format-1"):
        fresh.load_checkpoint(folder)


def test_close_finishes_the_service_session_once():
    trainer, service = _fake_trainer()
    trainer.close()
    trainer.close()
    assert service.closed == ["success"]


def test_sdk_errors_are_translated_with_what_failed():
    from agentcore_rl_harness.trainers.tinker import TinkerServiceError

    trainer, _ = _fake_trainer()

    def failing(*args, **kwargs):
        raise tinker.TinkerError("boom")

    trainer.training_client.save_state = failing
    with pytest.raises(TinkerServiceError, match="save_state .* failed: TinkerError: boom"):
        trainer.save_checkpoint("unused")


def test_kl_is_rejected_when_composed_and_again_by_the_builder():
    import dataclasses

    from agentcore_rl_harness.trainers.tinker import build_trainer

    with pytest.raises(ConfigError, match="algo.kl_coef=0.05"):
        compose_config(["trainer=tinker", "algo.kl_coef=0.05"])
    # A section built by hand (not through compose) is still checked before the service is contacted.
    composed = compose_config(["trainer=tinker"])
    section = dataclasses.replace(
        composed.typed.trainer, algo=dataclasses.replace(composed.typed.trainer.algo, kl_coef=0.05)
    )
    with pytest.raises(ConfigError, match="algo.kl_coef=0.05"):
        build_trainer(section=section, model_dir=None, tokenizer=None, config=composed.typed)


def test_sampler_keeps_the_version_its_sample_started_with():
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.tinker import TinkerSampler

    class Slow:
        def __init__(self, sampler):
            self.sampler = sampler

        async def sample_async(self, **request):
            self.sampler.publish_weights(object(), policy_version=7)
            sequence = tinker.types.SampledSequence(stop_reason="stop", sequence_id="s", _tokens_list=[3],
                                                    _logprobs_list=[-0.5])
            return tinker.types.SampleResponse(sequences=[sequence])

    sampler = TinkerSampler(None, policy_version=2)
    sampler.sampling_client = Slow(sampler)
    result = asyncio.run(sampler.sample(prompt_token_ids=[1, 2], params=SamplingParams(max_tokens=1)))
    assert result.policy_version == 2 and sampler.policy_version == 7
    sampler.close()



# --- end to end against the local Tinker-compatible server (agentcore_rl_harness.tinker_server) ---

TEST_KEY = "tml-agentcore-rl-test"


@pytest.fixture(scope="module")
def tinker_server(tiny_model_dir, tmp_path_factory):
    server_module = pytest.importorskip("agentcore_rl_harness.tinker_server")
    with server_module.TinkerServer(model="tiny", max_models=8,
                                    checkpoint_dir=tmp_path_factory.mktemp("tinker-ckpt")) as server:
        yield server


def _sample_all(sampler, prompt, seeds, max_tokens=6):
    from agentcore_rl_harness.records import SamplingParams

    async def run():
        return [await sampler.sample(prompt_token_ids=prompt, params=SamplingParams(max_tokens=max_tokens, seed=seed))
                for seed in seeds]

    return asyncio.run(run())


@pytest.mark.slow
def test_step_against_the_local_server_moves_the_sampler_to_new_weights(tinker_server):
    trainer = TinkerTrainer(config=TinkerTrainerConfig(base_url=tinker_server.base_url, lr=1e-2, lora_rank=8),
                            algo=GRPOConfig(), base_model="tiny", api_key=TEST_KEY)
    try:
        prompt = [1, 17, 42, 99, 7]
        before = _sample_all(trainer.sampler, prompt, seeds=range(4))
        assert all(result.policy_version == 0 for result in before)
        traces = [_trace(prompt, result.token_ids, result.logprobs, version=result.policy_version)
                  for result in before]
        rewards = [1.0, 0.0, 0.0, 0.0]
        groups = [TrainGroup("g", tuple(TrainSample(str(i), reward, (trace,))
                                        for i, (reward, trace) in enumerate(zip(rewards, traces))))]
        metrics = asyncio.run(trainer.step(groups=groups))
        assert metrics.policy_version == trainer.policy_version == trainer.sampler.policy_version == 1
        assert metrics.loss is not None and metrics.trained_tokens == sum(len(r.token_ids) for r in before)
        assert metrics.sampler_kl == pytest.approx(0.0, abs=1e-3)  # the service scored the sampled tokens alike
        after = _sample_all(trainer.sampler, prompt, seeds=[0])[0]
        assert after.policy_version == 1
        rewarded = before[0]
        # same seed: either other tokens now, or the rewarded tokens became more likely
        assert after.token_ids != rewarded.token_ids or sum(after.logprobs) > sum(rewarded.logprobs)
        assert after.logprobs != rewarded.logprobs
    finally:
        trainer.close()





@pytest.mark.slow
def test_pytest_run_trains_through_trainer_tinker(pytester, tinker_server, monkeypatch):
    """`pytest --agentcore-rl run` with trainer=tinker: steps on the service, the gateway samples
    each step from the new weights, and the final checkpoint's policy differs from the base."""
    monkeypatch.setenv("TINKER_API_KEY", TEST_KEY)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    write_project(pytester.path, task=even_length_task(samples=3), dataset=rows(6, train=4))
    overrides = ["model=tiny", "sampling.max_tokens=6", "trainer=tinker", f"trainer.base_url={tinker_server.base_url}",
                 "trainer.lora_rank=8", "trainer.lr=1e-2", "trainer.steps=2", "trainer.batch_rows=2",
                 "trainer.checkpoint_every=1"]
    args = [item for override in overrides for item in ("--agentcore-rl-set", override)]
    result = pytester.runpytest_subprocess("--agentcore-rl", "run", *args, "--agentcore-rl-out", "run", timeout=900)
    assert result.ret == 0, result.stdout.str()[-4000:] + result.stderr.str()[-2000:]
    run = pytester.path / "run"
    steps = [json.loads(line) for line in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert [step["step"] for step in steps] == [1, 2]
    trained = [step for step in steps if step["trained_tokens"]]
    assert trained, steps  # at least one step had a non-constant group
    assert steps[-1]["policy_version"] == len(trained)
    for step in trained:
        assert step["loss"] is not None and step["sampler_kl"] == pytest.approx(0.0, abs=1e-2)
    records = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    post = [r for r in records if r["phase"] == "post"]
    assert post and all(r["traces"][0]["metadata"]["policy_versions"] == [len(trained)] for r in post)
    checkpoint = json.loads((run / "checkpoints" / "step-00002" / CHECKPOINT_FILE).read_text())
    assert checkpoint["step"] == 2 and checkpoint["policy_version"] == len(trained)
    assert TEST_KEY not in (run / "config.yaml").read_text()

    # The trained policy answers differently from the base model (same prompt, same seed).
    service = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=TEST_KEY)
    try:
        restored = service.create_training_client_from_state(checkpoint["tinker_path"]).result()
        trained_client = restored.save_weights_and_get_sampling_client().result()
        base_client = service.create_sampling_client(base_model="tiny").result()
        prompt = tinker.ModelInput.from_ints([1, 17, 42, 99, 7])
        params = tinker.SamplingParams(max_tokens=6, seed=3, temperature=1.0)
        trained_out = trained_client.sample(prompt=prompt, num_samples=1, sampling_params=params).result()
        base_out = base_client.sample(prompt=prompt, num_samples=1, sampling_params=params).result()
        assert trained_out.sequences[0].logprobs != base_out.sequences[0].logprobs
    finally:
        service.close("success").result(30)
