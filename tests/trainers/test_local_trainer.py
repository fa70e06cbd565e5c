import asyncio
import dataclasses
import random
import time

import pytest
import torch

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.records import SamplingParams, Trace
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler
from agentcore_rl_harness.trainers import (
    GRPOConfig,
    LocalTrainer,
    LocalTrainerConfig,
    Trainer,
    TrainGroup,
    TrainSample,
)
from agentcore_rl_harness.trainers.checkpoint import CheckpointError


def _prompt(length, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, 49000) for _ in range(length)]


def _sample(sampler, requests):
    async def run():
        return await asyncio.gather(
            *(sampler.sample(prompt_token_ids=prompt, params=params) for prompt, params in requests)
        )

    return asyncio.run(run())


def _traces(sampler, prompts, *, temperature=1.0, max_tokens=6, seed=0):
    """Traces as the gateway records them: mask 1 and the sampler's logprob on sampled tokens."""
    requests = [
        (prompt, SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + index))
        for index, prompt in enumerate(prompts)
    ]
    results = _sample(sampler, requests)
    return [
        Trace(
            token_ids=tuple(prompt) + result.token_ids,
            prompt_length=len(prompt),
            loss_mask=(1,) * len(result.token_ids),
            logprobs=result.logprobs,
            finish_reason=result.finish_reason.value,
            metadata={"policy_versions": [result.policy_version]},
        )
        for (prompt, _), result in zip(requests, results)
    ]


def _step(trainer, groups):
    return asyncio.run(trainer.step(groups=groups))


def _pair_group(group_id, good, bad):
    return TrainGroup(group_id, (TrainSample(f"{group_id}/good", 1.0, (good,)), TrainSample(f"{group_id}/bad", 0.0, (bad,))))


@pytest.fixture
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture
def sampler(model):
    sampler = HFLocalSampler(model, batch_wait_s=0.01)
    yield sampler
    sampler.close()


def _config(**changes):
    base = dict(lr=1e-2, device="cpu")
    base.update(changes)
    return LocalTrainerConfig(**base)


def test_is_a_trainer(model):
    assert isinstance(LocalTrainer(model, config=_config()), Trainer)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_equal_the_samplers_and_a_shift_is_caught(model, sampler, temperature):
    trainer = LocalTrainer(model, sampler=sampler, config=_config(temperature=temperature))
    prompts = [_prompt(length, seed) for seed, length in enumerate([3, 11, 25, 7])]
    traces = _traces(sampler, prompts, temperature=temperature)

    recomputed = trainer.compute_logprobs(traces)
    for trace, values in zip(traces, recomputed):
        assert max(abs(a - b) for a, b in zip(values, trace.logprobs)) < 1e-4

    # the same tokens with mask and logprobs shifted one position left must not line up
    shifted = [
        Trace(
            token_ids=t.token_ids,
            prompt_length=t.prompt_length - 1,
            loss_mask=t.loss_mask + (0,),
            logprobs=t.logprobs + (None,),
            finish_reason=t.finish_reason,
        )
        for t in traces
    ]
    worst = max(
        abs(a - b)
        for trace, values in zip(shifted, trainer.compute_logprobs(shifted))
        for a, b, m in zip(values, trace.logprobs, trace.loss_mask)
        if m
    )
    assert worst > 1e-2


def test_multi_turn_trace_with_untrained_tool_tokens_stays_aligned(model, sampler):
    """turn 1 sampled, tool output (mask 0, no logprob), turn 2 sampled on the whole history."""
    trainer = LocalTrainer(model, sampler=sampler, config=_config())
    prompt = _prompt(9, 1)
    first = _sample(sampler, [(prompt, SamplingParams(max_tokens=5, seed=1))])[0]
    tool = _prompt(4, 2)
    history = prompt + list(first.token_ids) + tool
    second = _sample(sampler, [(history, SamplingParams(max_tokens=5, seed=2))])[0]
    trace = Trace(
        token_ids=tuple(history) + second.token_ids,
        prompt_length=len(prompt),
        loss_mask=(1,) * 5 + (0,) * 4 + (1,) * 5,
        logprobs=first.logprobs + (None,) * 4 + second.logprobs,
        finish_reason="length",
    )
    (values,) = trainer.compute_logprobs([trace])
    for value, recorded in zip(values, trace.logprobs):
        assert (value is None) == (recorded is None)
        if recorded is not None:
            assert value == pytest.approx(recorded, abs=1e-4)


def test_a_step_before_any_update_is_on_policy(model, sampler):
    trainer = LocalTrainer(model, sampler=sampler, config=_config())
    good, bad = _traces(sampler, [_prompt(8, 3)] * 2)
    metrics = _step(trainer, [_pair_group("g", good, bad)])
    assert metrics.sampler_kl == pytest.approx(0.0, abs=1e-5)
    assert metrics.clip_fraction == 0.0
    assert metrics.staleness_max == 0


def test_one_update_raises_positive_lowers_negative_and_the_sampler_serves_it(model, sampler):
    trainer = LocalTrainer(model, sampler=sampler, config=_config())
    prompt = _prompt(8, 4)
    good, bad = _traces(sampler, [prompt, prompt], seed=10)
    probe = [(prompt, SamplingParams(temperature=0.0, max_tokens=1))]
    before_probe = _sample(sampler, probe)[0]
    before = [sum(v) for v in trainer.compute_logprobs([good, bad])]

    metrics = _step(trainer, [_pair_group("g", good, bad)])

    after = [sum(v) for v in trainer.compute_logprobs([good, bad])]
    assert after[0] > before[0]
    assert after[1] < before[1]
    assert metrics.step == 1 and metrics.policy_version == 1
    assert metrics.trained_tokens == len(good.loss_mask) + len(bad.loss_mask)
    assert 0 < metrics.sync_s < metrics.wall_time_s  # the swap into the sampler, timed (steps.jsonl sync_s)
    assert metrics.grad_norm > 0
    # the sampler decodes with the new weights and labels them with the new version
    after_probe = _sample(sampler, probe)[0]
    assert sampler.policy_version == 1 and after_probe.policy_version == 1
    assert after_probe.logprobs[0] != pytest.approx(before_probe.logprobs[0], abs=1e-4)
    probe_trace = Trace(
        token_ids=tuple(prompt) + after_probe.token_ids,
        prompt_length=len(prompt),
        loss_mask=(1,),
        logprobs=after_probe.logprobs,
        finish_reason="length",
    )
    assert trainer.compute_logprobs([probe_trace])[0][0] == pytest.approx(after_probe.logprobs[0], abs=1e-4)
    assert not model.training  # sampling runs in eval mode


@pytest.mark.parametrize("serve_merged", [True, False])
def test_the_sampler_decodes_the_merged_copy_or_the_adapted_model(tiny_model_dir, serve_merged, tmp_path):
    """serve_merged: the sampler gets a plain model (no LoRA layers) whose logits equal the adapted
    policy's after every update and after a checkpoint load; off, it decodes the policy itself."""
    from peft.tuners.lora import LoraLayer

    sampler = HFLocalSampler(load_model(tiny_model_dir), batch_wait_s=0.01)
    try:
        trainer = LocalTrainer(sampler.model, sampler=sampler, config=_config(serve_merged=serve_merged))
        prompt = _prompt(10, 5)
        good, bad = _traces(sampler, [prompt, prompt], seed=3)
        _step(trainer, [_pair_group("g", good, bad)])
        ids = torch.tensor([list(good.token_ids)])

        def served_logits():
            with torch.no_grad():
                return sampler.model(input_ids=ids).logits

        with torch.no_grad():
            policy = trainer.policy_model(input_ids=ids).logits
        assert (sampler.model is trainer.policy_model) is not serve_merged
        assert any(isinstance(m, LoraLayer) for m in sampler.model.modules()) is not serve_merged
        torch.testing.assert_close(served_logits(), policy, atol=1e-5, rtol=0)

        trainer.save_checkpoint(tmp_path / "ckpt")
        _step(trainer, [_pair_group("h", bad, good)])
        moved = served_logits()
        assert not torch.allclose(moved, policy, atol=1e-4)  # the second update reached the sampler
        trainer.load_checkpoint(tmp_path / "ckpt")
        torch.testing.assert_close(served_logits(), policy, atol=1e-5, rtol=0)
    finally:
        sampler.close()


def test_serve_dtype_bfloat16_serves_a_bf16_merged_copy_that_tracks_the_policy(tiny_model_dir):
    """trainer.serve_dtype=bfloat16: the sampler decodes a bfloat16 merged copy (fp32 attention over
    an fp32 cache, `_fp32_attention.py`) whose logits follow the fp32 policy's to bf16 precision;
    the policy itself stays fp32."""
    from agentcore_rl_harness.samplers import _fp32_attention

    sampler = HFLocalSampler(load_model(tiny_model_dir), batch_wait_s=0.01)
    try:
        trainer = LocalTrainer(sampler.model, sampler=sampler, config=_config(serve_dtype="bfloat16"))
        assert next(sampler.model.parameters()).dtype == torch.bfloat16
        assert next(trainer.policy_model.parameters()).dtype == torch.float32
        prompt = _prompt(10, 5)
        good, bad = _traces(sampler, [prompt, prompt], seed=3)  # sampled from the bf16 copy
        assert sampler.model.config._attn_implementation == _fp32_attention.NAME
        ids = torch.tensor([list(good.token_ids)])
        with torch.no_grad():
            before = sampler.model(input_ids=ids).logits.float()
        _step(trainer, [_pair_group("g", good, bad)])
        with torch.no_grad():
            served, policy = sampler.model(input_ids=ids).logits.float(), trainer.policy_model(input_ids=ids).logits
        assert not torch.allclose(served, before, atol=1e-3)  # the update reached the copy
        # bf16 weights: the logits agree to bf16's ~3 significant digits, not to fp32's
        scale = policy.abs().max().item()
        assert (served - policy).abs().max().item() < 0.02 * scale, (scale, (served - policy).abs().max())
    finally:
        sampler.close()


@pytest.mark.parametrize(("changes", "message"), [
    (dict(serve_dtype="int8"), "trainer.serve_dtype='int8'; valid choices: null, bfloat16, float16"),
    (dict(serve_dtype="bfloat16", serve_merged=False), "needs the merged serving copy"),
    (dict(serve_dtype="bfloat16", finetune="full"), "needs the merged serving copy"),
])
def test_bad_serve_dtype_is_a_config_error(changes, message):
    with pytest.raises(ConfigError, match=message):
        _config(**changes)


def test_micro_batches_give_the_same_update(tiny_model_dir, sampler):
    prompts = [_prompt(length, seed) for seed, length in enumerate([4, 12, 20, 6])]
    traces = _traces(sampler, prompts, max_tokens=8)
    groups = [_pair_group("a", traces[0], traces[1]), _pair_group("b", traces[2], traces[3])]
    results = []
    for config in (_config(micro_batch_size=1), _config(micro_batch_tokens=None)):
        trainer = LocalTrainer(load_model(tiny_model_dir), config=config)
        metrics = _step(trainer, groups)
        results.append((metrics, [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]))
    (one, one_params), (all_, all_params) = results
    assert one.loss == pytest.approx(all_.loss, abs=1e-6)
    assert one.grad_norm == pytest.approx(all_.grad_norm, rel=1e-4)
    for a, b in zip(one_params, all_params):
        # Adam's first step is ~lr * g / (|g| + eps): where |g| ~ eps, float summation order moves
        # it by a little; a wrong accumulation moves it by ~lr (1e-2)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_groups_that_teach_nothing_leave_the_weights_alone(model, sampler):
    trainer = LocalTrainer(model, sampler=sampler, config=_config())
    a, b, c = _traces(sampler, [_prompt(5, 6)] * 3)
    constant = TrainGroup("c", (TrainSample("c/0", 1.0, (a,)), TrainSample("c/1", 1.0, (b,))))
    single = TrainGroup("s", (TrainSample("s/0", 0.0, (c,)),))
    metrics = _step(trainer, [constant, single])
    assert metrics.loss is None and metrics.trained_tokens == 0
    assert metrics.groups_skipped == 2
    assert metrics.reward_mean == pytest.approx(2 / 3)
    assert metrics.policy_version == 0 and sampler.policy_version == 0
    assert metrics.step == 1 and metrics.sync_s is None  # nothing changed: nothing synced


def test_staleness_is_the_lag_behind_the_trainer(model, sampler):
    trainer = LocalTrainer(model, sampler=sampler, config=_config())
    old_good, old_bad = _traces(sampler, [_prompt(5, 7)] * 2)
    _step(trainer, [_pair_group("g", old_good, old_bad)])
    new_good, new_bad = _traces(sampler, [_prompt(5, 8)] * 2)
    assert new_good.metadata["policy_versions"] == [1]
    metrics = _step(trainer, [_pair_group("old", old_good, old_bad), _pair_group("new", new_good, new_bad)])
    assert metrics.staleness_max == 1
    assert metrics.staleness_mean == pytest.approx(0.5)
    assert metrics.sampler_kl > 0  # the old traces are off-policy now


def test_kl_to_the_initial_policy_uses_the_disabled_adapter(model, sampler):
    trainer = LocalTrainer(model, sampler=sampler, config=_config(), algo=GRPOConfig(kl_coef=0.1))
    good, bad = _traces(sampler, [_prompt(6, 9)] * 2)
    first = _step(trainer, [_pair_group("g", good, bad)])
    second = _step(trainer, [_pair_group("g", good, bad)])
    assert first.kl == pytest.approx(0.0, abs=1e-7)  # LoRA starts as the identity
    assert second.kl > 0


def test_checkpoint_resume_gives_the_same_next_steps(tiny_model_dir, sampler, tmp_path):
    traces = _traces(sampler, [_prompt(length, seed) for seed, length in enumerate([5, 9, 14, 7, 3, 11])])
    batches = [[_pair_group(f"g{i}", traces[2 * i], traces[2 * i + 1])] for i in range(3)]
    config = _config(lr=5e-3)

    uninterrupted = LocalTrainer(load_model(tiny_model_dir), config=config)
    _step(uninterrupted, batches[0])
    uninterrupted.save_checkpoint(tmp_path / "ckpt")
    expected_rand = torch.rand(3)
    expected = [_step(uninterrupted, batches[1]), _step(uninterrupted, batches[2])]

    resumed = LocalTrainer(load_model(tiny_model_dir), config=dataclasses.replace(config, seed=1))
    assert resumed.load_checkpoint(tmp_path / "ckpt") == 1
    assert torch.equal(torch.rand(3), expected_rand)  # RNG states restored
    assert resumed.policy_version == 1
    got = [_step(resumed, batches[1]), _step(resumed, batches[2])]
    for want, have in zip(expected, got):
        assert have.step == want.step
        assert have.loss == pytest.approx(want.loss, abs=1e-6)
    assert (tmp_path / "ckpt" / "adapter").is_dir()


def test_a_checkpoint_from_another_setup_is_refused(tiny_model_dir, tmp_path):
    LocalTrainer(load_model(tiny_model_dir), config=_config()).save_checkpoint(tmp_path / "ckpt")
    other = LocalTrainer(load_model(tiny_model_dir), config=_config(lora_rank=4, lora_target_modules=("q_proj",)))
    with pytest.raises(CheckpointError, match="does not fit"):
        other.load_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="not a trainer checkpoint"):
        other.load_checkpoint(tmp_path / "missing")


def test_full_finetuning_with_kl_keeps_a_frozen_reference(model, sampler, tmp_path):
    trainer = LocalTrainer(
        model, sampler=sampler, config=_config(finetune="full", lr=1e-3), algo=GRPOConfig(kl_coef=0.1)
    )
    assert trainer.trainable_parameters == sum(p.numel() for p in model.parameters())
    good, bad = _traces(sampler, [_prompt(6, 11)] * 2)
    before = [sum(v) for v in trainer.compute_logprobs([good, bad])]
    first = _step(trainer, [_pair_group("g", good, bad)])
    after = [sum(v) for v in trainer.compute_logprobs([good, bad])]
    assert after[0] > before[0] and after[1] < before[1]
    assert first.kl == pytest.approx(0.0, abs=1e-7)
    assert _step(trainer, [_pair_group("g", good, bad)]).kl > 0
    assert sampler.policy_version == 2
    trainer.save_checkpoint(tmp_path / "full")
    assert not (tmp_path / "full" / "adapter").exists()


@pytest.mark.parametrize("lora_layers", [1, None])
def test_lora_layers_adapts_the_top_layers_and_the_backward_stops_there(tiny_model_dir, lora_layers):
    """trainer.lora_layers=N: adapters only on the top N decoder layers, gradients never run
    through the layers below them, and the update still moves the policy the sampler serves."""
    from peft.tuners.lora import LoraLayer

    sampler = HFLocalSampler(load_model(tiny_model_dir), batch_wait_s=0.01)
    try:
        trainer = LocalTrainer(sampler.model, sampler=sampler, config=_config(lora_layers=lora_layers))
        layers = trainer.policy_model.model.layers
        adapted = [any(isinstance(m, LoraLayer) for m in layer.modules()) for layer in layers]
        assert adapted == ([False] * (len(layers) - 1) + [True] if lora_layers == 1 else [True] * len(layers))
        reached = []
        layers[0].register_full_backward_hook(lambda *args: reached.append(True))
        prompt = _prompt(10, 6)
        good, bad = _traces(sampler, [prompt, prompt], seed=4)
        before = [sum(v) for v in trainer.compute_logprobs([good, bad])]
        _step(trainer, [_pair_group("g", good, bad)])
        after = [sum(v) for v in trainer.compute_logprobs([good, bad])]
        assert after[0] > before[0] and after[1] < before[1]
        assert bool(reached) is (lora_layers is None)
        ids = torch.tensor([list(good.token_ids)])
        with torch.no_grad():
            torch.testing.assert_close(sampler.model(input_ids=ids).logits,
                                       trainer.policy_model(input_ids=ids).logits, atol=1e-5, rtol=0)
    finally:
        sampler.close()


def test_concurrent_sampling_decodes_during_the_update_and_each_row_keeps_one_version(tiny_model_dir):
    """trainer.overlap_rollouts: the update runs while a row decodes (the sampler is not locked
    out), the new weights reach the sampler only after that row ends, and the row's logprobs are
    the old policy's from its first token to its last."""
    import copy
    import threading

    sampler = HFLocalSampler(load_model(tiny_model_dir), batch_wait_s=0.01)
    try:
        initial = copy.deepcopy(sampler.model)
        trainer = LocalTrainer(sampler.model, sampler=sampler, config=_config(), concurrent_sampling=True)
        prompt = _prompt(10, 7)
        good, bad = _traces(sampler, [prompt, prompt], seed=5)
        update, forwards = trainer._update, []

        def update_while_the_row_decodes(items, total):
            before = sampler.forward_calls
            result = update(items, total)
            deadline = time.monotonic() + 30
            while sampler.forward_calls == before and time.monotonic() < deadline:
                time.sleep(0.01)  # a sampler locked out by the update would never move
            forwards.append(sampler.forward_calls - before)
            return result

        trainer._update = update_while_the_row_decodes
        row_prompt = _prompt(12, 8)
        results = []
        worker = threading.Thread(target=lambda: results.append(_sample(sampler, [
            (row_prompt, SamplingParams(temperature=1.0, max_tokens=400, seed=1))])[0]))
        worker.start()
        while not sampler.forward_calls:
            time.sleep(0.001)
        _step(trainer, [_pair_group("g", good, bad)])
        worker.join()
        sampler.settle()  # the swap lands as the row ends, maybe just after its result reached us
        (row,) = results
        assert forwards and forwards[0] > 0
        assert row.policy_version == 0 and sampler.policy_version == 1
        ids = _assert_sampled_under(initial, row_prompt, row)
        with torch.no_grad():  # and what the sampler serves now is the updated policy
            torch.testing.assert_close(sampler.model(input_ids=ids).logits, trainer.policy_model(input_ids=ids).logits,
                                       atol=1e-5, rtol=0)
    finally:
        sampler.close()


def test_concurrent_sampling_steps_do_not_wait_for_the_rows_and_never_write_the_buffer_they_decode(tiny_model_dir):
    """Async training: an update returns while a row still decodes (its weight sync does not wait
    for the sampler's rows); the next update waits for the swap before writing the other buffer,
    which the row is decoding, so the row keeps the old policy's logprobs to its last token."""
    import copy
    import threading

    sampler = HFLocalSampler(load_model(tiny_model_dir), batch_wait_s=0.01)
    gate, gated = threading.Event(), threading.Event()
    try:
        initial = copy.deepcopy(sampler.model)
        trainer = LocalTrainer(sampler.model, sampler=sampler, config=_config(), concurrent_sampling=True)
        prompt = _prompt(10, 7)
        good, bad = _traces(sampler, [prompt, prompt], seed=5)
        forward = sampler._forward

        def held_forward(**inputs):  # the row's decoding stops here once, until the test lets it go
            if gated.is_set():
                gated.clear()
                gate.wait(timeout=10)
            return forward(**inputs)

        sampler._forward = held_forward
        row_prompt, results = _prompt(12, 8), []
        worker = threading.Thread(target=lambda: results.append(_sample(sampler, [
            (row_prompt, SamplingParams(temperature=1.0, max_tokens=40, seed=1))])[0]))
        worker.start()
        while sampler.forward_calls < 2:
            time.sleep(0.001)
        gated.set()
        _step(trainer, [_pair_group("g", good, bad)])
        assert not results and sampler.policy_version == 0  # the step returned; the row still decodes
        second = threading.Thread(target=_step, args=(trainer, [_pair_group("g2", good, bad)]))
        second.start()
        second.join(timeout=2.0)
        assert second.is_alive()  # waiting for the swap: the row decodes the buffer it would write
        gate.set()
        worker.join()
        second.join()
        (row,) = results
        assert row.policy_version == 0 and sampler.policy_version == 2
        ids = _assert_sampled_under(initial, row_prompt, row)
        with torch.no_grad():
            torch.testing.assert_close(sampler.model(input_ids=ids).logits, trainer.policy_model(input_ids=ids).logits,
                                       atol=1e-5, rtol=0)
    finally:
        gate.set()
        sampler.close()


@pytest.mark.parametrize("changes", [dict(serve_merged=False), dict(finetune="full")])
def test_concurrent_sampling_needs_a_merged_copy(tiny_model_dir, changes):
    model = load_model(tiny_model_dir)
    sampler = HFLocalSampler(model, batch_wait_s=0.01)
    try:
        with pytest.raises(ConfigError, match=r"trainer.overlap_rollouts=true needs .*trainer.serve_merged=true"):
            LocalTrainer(model, sampler=sampler, config=_config(**changes), concurrent_sampling=True)
    finally:
        sampler.close()


def test_more_lora_layers_than_the_model_has_is_a_config_error(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"trainer.lora_layers=3 is more than the model's 2 decoder layers"):
        LocalTrainer(load_model(tiny_model_dir), config=_config(lora_layers=3))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"finetune": "qlora"}, "trainer.finetune"),
        ({"lora_layers": 0}, "trainer.lora_layers=0 needs"),
        ({"lora_layers": 2, "finetune": "full"}, "trainer.lora_layers=2 needs trainer.finetune=lora"),
        ({"micro_batch_tokens": 0}, "trainer.micro_batch_tokens"),
        ({"autocast_dtype": "int8"}, "trainer.autocast_dtype"),
        ({"lr": 0.0}, "trainer.lr"),
        ({"share_prefix_min_tokens": 0}, "trainer.share_prefix_min_tokens"),
    ],
)
def test_bad_trainer_config_names_the_key(changes, match):
    with pytest.raises(ConfigError, match=match):
        LocalTrainerConfig(**changes)


def test_a_merged_copy_of_a_policy_without_lora_layers_says_how_to_fix_it(model):
    from types import SimpleNamespace

    from agentcore_rl_harness.trainers._serving import MergedCopy

    with pytest.raises(ValueError, match=r"no LoRA layers.*trainer.lora_target_modules.*serve_merged=false"):
        MergedCopy(model).refresh(SimpleNamespace(get_base_model=lambda: model))


def _assert_sampled_under(policy, prompt, row):
    """`row`'s logprobs are `policy`'s for its tokens (it decoded one policy to its last token);
    the prompt + reply ids."""
    ids = torch.tensor([list(prompt) + list(row.token_ids)])
    with torch.no_grad():
        old = torch.log_softmax(policy(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1)
    picked = old.gather(-1, torch.tensor(row.token_ids).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(torch.tensor(row.logprobs), picked, atol=2e-4, rtol=0)
    return ids
