import asyncio
import random
from types import SimpleNamespace

import pytest
import torch

from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.records import Trace
from agentcore_rl_harness.trainers import GRPOConfig, LocalTrainer, LocalTrainerConfig, TrainGroup, TrainSample
from agentcore_rl_harness.trainers import _prefix
from agentcore_rl_harness.trainers.grpo import build_batch


def _tokens(rng, length):
    return [rng.randrange(100, 49000) for _ in range(length)]


def _drafts():
    """Two GRPO groups behind one system prompt, plus a multi-turn trace with untrained tool tokens."""
    rng = random.Random(0)
    system = _tokens(rng, 24)
    groups = []
    for group in range(2):
        prompt = system + _tokens(rng, 10 + 2 * group)
        traces = []
        for _ in range(4):
            completion = _tokens(rng, rng.randrange(4, 12))
            traces.append(Trace(tuple(prompt + completion), len(prompt), (1,) * len(completion), (0.0,) * len(completion), "stop"))
        groups.append(traces)
    prompt = system + _tokens(rng, 9)
    turn_one, tool, turn_two = _tokens(rng, 5), _tokens(rng, 4), _tokens(rng, 5)
    mask = (1,) * 5 + (0,) * 4 + (1,) * 5
    multi_turn = Trace(tuple(prompt + turn_one + tool + turn_two), len(prompt), mask, tuple(0.0 if m else None for m in mask), "stop")
    short = Trace(tuple(prompt + turn_one), len(prompt), (1,) * 5, (0.0,) * 5, "stop")
    groups.append([multi_turn, short])
    return groups


def _groups(trainer, drafts):
    """Recorded logprobs = the policy's own plus noise, so ratios differ from 1 and some clip."""
    rng = random.Random(1)
    flat = [trace for traces in drafts for trace in traces]
    recomputed = trainer.compute_logprobs(flat)
    groups, position = [], 0
    for number, traces in enumerate(drafts):
        samples = []
        for index, trace in enumerate(traces):
            values = recomputed[position]
            position += 1
            logprobs = tuple(None if v is None else v + rng.uniform(-0.3, 0.3) for v in values)
            noisy = Trace(trace.token_ids, trace.prompt_length, trace.loss_mask, logprobs, trace.finish_reason)
            samples.append(TrainSample(f"g{number}/{index}", float(index % 2), (noisy,)))
        groups.append(TrainGroup(f"g{number}", tuple(samples)))
    return groups


def _trainer(tiny_model_dir, *, share, finetune="lora", kl=0.0, **changes):
    config = LocalTrainerConfig(
        lr=1e-2 if finetune == "lora" else 1e-3,
        device="cpu",
        finetune=finetune,
        max_grad_norm=None,
        share_prefix=share,
        share_prefix_min_tokens=4,
        **changes,
    )
    return LocalTrainer(load_model(tiny_model_dir), config=config, algo=GRPOConfig(kl_coef=kl))


def _run(trainer, groups, steps):
    """Per step: the batch's logprobs before it, the gradients it applied, its metrics; then the weights."""
    captured = []
    original = trainer.optimizer.step

    def step_and_capture(*args, **kwargs):
        captured.append([p.grad.detach().clone() for p in trainer._parameters])
        return original(*args, **kwargs)

    trainer.optimizer.step = step_and_capture
    items, _ = build_batch(groups, normalize_std=True)
    records = []
    for _ in range(steps):
        tensors = trainer._tensors(items)
        with torch.no_grad():
            logprobs = trainer._logprobs(trainer.policy_model, tensors)
        metrics = asyncio.run(trainer.step(groups=groups))
        records.append((logprobs, metrics))
    weights = [p.detach().clone() for p in trainer._parameters]
    return records, captured, weights


@pytest.mark.parametrize("finetune, kl", [("lora", 0.0), ("lora", 0.1), ("full", 0.1)])
def test_sharing_prefixes_gives_the_same_logprobs_loss_gradients_and_update(tiny_model_dir, finetune, kl):
    drafts = _drafts()
    shared = _trainer(tiny_model_dir, share=True, finetune=finetune, kl=kl, micro_batch_tokens=None)
    plain = _trainer(tiny_model_dir, share=False, finetune=finetune, kl=kl, micro_batch_tokens=None)
    groups = _groups(plain, drafts)
    items, _ = build_batch(groups, normalize_std=True)
    tree = shared._prefix_tree(items)
    assert len(tree.children) == 1 and len(tree.children[0].children) == 3  # system prompt, then each question

    steps = 2 if kl else 1  # LoRA starts as the identity: its KL shows from the second step on
    got, got_grads, got_weights = _run(shared, groups, steps=steps)
    want, want_grads, want_weights = _run(plain, groups, steps=steps)

    for (logprobs, metrics), (expected_logprobs, expected) in zip(got, want):
        torch.testing.assert_close(logprobs, expected_logprobs, atol=1e-5, rtol=0)
        assert metrics.loss == pytest.approx(expected.loss, abs=1e-6)
        assert metrics.clip_fraction == expected.clip_fraction
        assert metrics.grad_norm == pytest.approx(expected.grad_norm, rel=1e-4)
        if kl:
            assert metrics.kl == pytest.approx(expected.kl, abs=1e-7)
    assert not kl or got[-1][1].kl > 0
    for step_grads, expected_grads in zip(got_grads, want_grads):
        for grad, expected_grad in zip(step_grads, expected_grads):
            torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=1e-4)
    # Adam moves a weight by ~lr * g / |g|: a near-zero gradient's rounding can show, so 1% of a step
    lr = shared.config.lr
    for weight, expected_weight in zip(got_weights, want_weights):
        torch.testing.assert_close(weight, expected_weight, atol=lr * 1e-2, rtol=1e-4)


def test_micro_batches_count_a_shared_prefix_once(tiny_model_dir):
    rng = random.Random(2)
    prompt = _tokens(rng, 40)
    traces = [
        Trace(tuple(prompt + _tokens(rng, 20)), 40, (1,) * 20, (-1.0,) * 20, "stop") for _ in range(8)
    ]
    group = TrainGroup("g", tuple(TrainSample(f"g/{i}", float(i % 2), (t,)) for i, t in enumerate(traces)))
    items, _ = build_batch([group], normalize_std=True)

    # 8 x 60 = 480 padded tokens unshared; 39 + 8 x 21 = 207 shared
    shared = _trainer(tiny_model_dir, share=True, micro_batch_tokens=256)
    assert [len(batch) for batch in shared._micro_batches(items)] == [8]
    plain = _trainer(tiny_model_dir, share=False, micro_batch_tokens=256)
    assert [len(batch) for batch in plain._micro_batches(items)] == [4, 4]

    tight = _trainer(tiny_model_dir, share=True, micro_batch_tokens=120)
    batches = list(tight._micro_batches(items))
    assert sorted(len(batch) for batch in batches) == [2, 3, 3]  # 39 + 3 x 21 = 102; a 4th would make 123
    for batch in batches:
        lengths = [len(item.token_ids) for item in batch]
        assert _prefix.tree_tokens(tight._prefix_tree(batch), lengths) <= 120

    # the tokens the model actually sees stay within the budget of each micro-batch
    seen = []
    decoder = tight.policy_model.get_decoder()
    handle = decoder.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].numel()), with_kwargs=True)
    try:
        asyncio.run(tight.step(groups=[group]))
    finally:
        handle.remove()
    assert sum(seen) == 39 * 3 + 21 * 8
    assert max(seen) <= 120


def test_the_tree_shares_up_to_the_token_before_the_first_trained_one():
    system, question = list(range(1000, 1040)), list(range(2000, 2010))
    prompt = system + question
    sequences = [prompt + [5, 6, 7], prompt + [5, 8, 9], prompt + [1, 2], system + [3000] * 20]
    limits = [len(prompt) - 1] * 3 + [len(system) + 2]
    tree = _prefix.build_tree(sequences, limits, min_tokens=8)
    assert tree.leaves == () and len(tree.children) == 1
    root = tree.children[0]
    assert root.tokens == tuple(system) and root.leaves == (3,)
    (group,) = root.children
    assert (group.start, group.end, group.leaves) == (40, 49, (0, 1, 2))
    # the completions' common "5" lies past the limit; the 9-token question segment is worth a node
    assert _prefix.tree_tokens(tree, [len(s) for s in sequences]) == 40 + 20 + 9 + 3 * 4

    # a question shorter than min_tokens stays in the suffixes
    coarse = _prefix.build_tree(sequences, limits, min_tokens=10)
    assert coarse.children[0].children == () and coarse.children[0].leaves == (0, 1, 2, 3)
    # the system prompt alone is too short at 41, the group's whole prompt is not
    fine = _prefix.build_tree(sequences, limits, min_tokens=41)
    assert fine.leaves == (3,) and [(n.start, n.end, n.leaves) for n in fine.children] == [(0, 49, (0, 1, 2))]


def test_shareable_length_stops_before_the_first_trained_token():
    assert _prefix.shareable_length(range(10), 6, (0, 0, 1, 1)) == 7
    assert _prefix.shareable_length(range(10), 6, (1, 1, 1, 1)) == 5
    assert _prefix.shareable_length(range(10), 1, (1,) * 9) == 0


def test_sliding_window_models_do_not_share(tiny_model_dir):
    model = load_model(tiny_model_dir)
    decoder = model.get_decoder()
    assert _prefix.supports_sharing(model, decoder)
    for config in (
        SimpleNamespace(layer_types=["full_attention", "sliding_attention"]),
        SimpleNamespace(sliding_window=4096),
    ):
        assert not _prefix.supports_sharing(SimpleNamespace(config=config), decoder)
    assert LocalTrainerConfig().share_prefix is True
