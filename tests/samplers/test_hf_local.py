import asyncio
import random
import threading

import pytest
import torch

from agentcore_rl_harness.errors import SamplingError
from agentcore_rl_harness.gateway.sampling import SamplingBackend
from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.records import FinishReason, SamplingParams
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def sampler(model):
    sampler = HFLocalSampler(model, batch_wait_s=0.02)
    yield sampler
    sampler.close()


def _prompt(length, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, 49000) for _ in range(length)]


def _sample_all(sampler, requests):
    async def run():
        return await asyncio.gather(
            *(sampler.sample(prompt_token_ids=prompt, params=params) for prompt, params in requests)
        )

    return asyncio.run(run())


def _reference_logits(model, prompt, token_ids):
    with torch.inference_mode():
        logits = model(torch.tensor([list(prompt) + list(token_ids)])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def test_is_a_sampling_backend(sampler):
    assert isinstance(sampler, SamplingBackend)


def test_batched_logprobs_match_a_plain_forward_pass(sampler, model):
    temperatures = [1.0, 0.7, 1.0, 0.7, 0.0, 1.0]
    lengths = [1, 4, 9, 17, 30, 6]
    requests = [
        (_prompt(length, seed), SamplingParams(temperature=temperature, max_tokens=8, seed=seed))
        for seed, (length, temperature) in enumerate(zip(lengths, temperatures))
    ]
    batches_before = sampler.batches_run

    results = _sample_all(sampler, requests)

    assert sampler.batches_run - batches_before == 1  # left-padded together
    for (prompt, params), result in zip(requests, results):
        assert result.finish_reason is FinishReason.LENGTH and len(result.token_ids) == 8
        logits = _reference_logits(model, prompt, result.token_ids)
        expected = torch.log_softmax(logits / (params.temperature or 1.0), dim=-1)
        expected = expected.gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(result.logprobs), expected, atol=1e-4, rtol=0)
        if params.temperature == 0:
            assert list(result.token_ids) == logits.argmax(-1).tolist()


def test_concurrent_requests_share_batches(sampler):
    requests = [(_prompt(5 + i, i), SamplingParams(max_tokens=3)) for i in range(8)]
    batches_before, forwards_before = sampler.batches_run, sampler.forward_calls

    results = _sample_all(sampler, requests)

    assert len(results) == 8
    assert sampler.batches_run - batches_before < 8
    assert sampler.forward_calls - forwards_before < 8 * 3


def test_stop_token_ends_the_sample_and_is_kept(sampler):
    prompt = _prompt(6, 42)
    (free,) = _sample_all(sampler, [(prompt, SamplingParams(temperature=0, max_tokens=8))])
    stop = free.token_ids[3]
    cut = free.token_ids.index(stop) + 1

    (stopped,) = _sample_all(
        sampler, [(prompt, SamplingParams(temperature=0, max_tokens=8, stop_token_ids=(stop,)))]
    )

    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.token_ids == free.token_ids[:cut] and stopped.token_ids[-1] == stop
    assert stopped.logprobs == free.logprobs[:cut]


def test_max_tokens_gives_length(sampler):
    (result,) = _sample_all(sampler, [(_prompt(3, 1), SamplingParams(max_tokens=5, stop_token_ids=(0,)))])
    assert result.finish_reason is FinishReason.LENGTH
    assert len(result.token_ids) == len(result.logprobs) == 5


def test_top_k_1_and_tiny_top_p_equal_greedy(sampler):
    prompt = _prompt(7, 3)
    greedy, top_k, top_p = _sample_all(
        sampler,
        [
            (prompt, SamplingParams(temperature=0, max_tokens=6)),
            (prompt, SamplingParams(temperature=1.0, top_k=1, max_tokens=6, seed=5)),
            (prompt, SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=6, seed=6)),
        ],
    )
    assert top_k.token_ids == greedy.token_ids == top_p.token_ids
    # both at temperature 1, and truncation is not folded into the logprob
    torch.testing.assert_close(torch.tensor(top_k.logprobs), torch.tensor(greedy.logprobs), atol=1e-4, rtol=0)


def test_seed_makes_sampling_deterministic(sampler):
    prompt = _prompt(5, 9)
    seeded = SamplingParams(temperature=1.0, max_tokens=10, seed=123)
    first, second, other = _sample_all(
        sampler, [(prompt, seeded), (prompt, seeded), (prompt, SamplingParams(max_tokens=10, seed=124))]
    )
    (alone,) = _sample_all(sampler, [(prompt, seeded)])
    assert first.token_ids == second.token_ids == alone.token_ids
    assert other.token_ids != first.token_ids


def test_too_long_prompt_is_a_sampling_error(sampler, model):
    limit = model.config.max_position_embeddings
    with pytest.raises(SamplingError, match=f"{limit} positions"):
        _sample_all(sampler, [([5] * (limit - 3), SamplingParams(max_tokens=10))])


@pytest.mark.parametrize(
    "params",
    [SamplingParams(max_tokens=0), SamplingParams(temperature=-1), SamplingParams(top_p=0.0)],
)
def test_bad_params_are_rejected(sampler, params):
    with pytest.raises(SamplingError):
        _sample_all(sampler, [([5, 6], params)])


def test_worker_errors_reach_every_caller_and_the_worker_survives(sampler, model):
    class Broken(torch.nn.Module):
        config = model.config

        def forward(self, **kwargs):
            raise RuntimeError("boom")

    sampler.publish_weights(Broken(), policy_version=7)
    try:
        outcomes = asyncio.run(_gather_outcomes(sampler, 3))
    finally:
        sampler.publish_weights(model, policy_version=0)
    assert len(outcomes) == 3
    for outcome in outcomes:
        assert isinstance(outcome, SamplingError) and "boom" in str(outcome)
        assert isinstance(outcome.__cause__, RuntimeError)

    sampler.set_policy_version(3)
    (result,) = _sample_all(sampler, [([5, 6], SamplingParams(max_tokens=2))])
    assert result.policy_version == 3
    sampler.set_policy_version(0)


async def _gather_outcomes(sampler, count):
    return await asyncio.gather(
        *(sampler.sample(prompt_token_ids=[5, 6], params=SamplingParams(max_tokens=2)) for _ in range(count)),
        return_exceptions=True,
    )


def test_closed_sampler_refuses_work(model):
    sampler = HFLocalSampler(model)
    sampler.close()
    with pytest.raises(SamplingError, match="closed"):
        _sample_all(sampler, [([5], SamplingParams(max_tokens=1))])


def test_from_path_accepts_a_name_or_folder(tiny_model_dir):
    sampler = HFLocalSampler.from_path(tiny_model_dir, max_batch_size=2)
    try:
        (result,) = _sample_all(sampler, [([5, 6, 7], SamplingParams(temperature=0, max_tokens=3))])
        assert len(result.token_ids) == 3
        assert sampler.max_batch_size == 2
    finally:
        sampler.close()


def _expected_logprobs(model, prompt, result, temperature=1.0):
    logits = _reference_logits(model, prompt, result.token_ids)
    expected = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return expected.gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]


def _after_tokens(count, start):
    """An on_token callback that calls `start()` (on the event loop) once `count` tokens arrived."""
    seen = []

    def on_token(token_id, logprob):
        seen.append(token_id)
        if len(seen) == count:
            start()

    return on_token


def test_a_request_joining_mid_flight_finishes_before_the_long_one(sampler):
    finished = []

    async def run():
        tasks = {}

        def start_short():
            tasks["short"] = asyncio.ensure_future(
                sampler.sample(prompt_token_ids=_prompt(9, 2), params=SamplingParams(max_tokens=3))
            )
            tasks["short"].add_done_callback(lambda _: finished.append("short"))

        long = asyncio.ensure_future(
            sampler.sample(
                prompt_token_ids=_prompt(4, 1), params=SamplingParams(max_tokens=200),
                on_token=_after_tokens(5, start_short),
            )
        )
        long.add_done_callback(lambda _: finished.append("long"))
        long_result = await long
        return long_result, await tasks["short"]

    long_result, short_result = asyncio.run(run())

    assert finished == ["short", "long"]
    assert len(long_result.token_ids) == 200 and len(short_result.token_ids) == 3


def test_rows_that_join_and_outlive_others_keep_exact_logprobs(sampler, model):
    specs = [  # (prompt, params, start after this many tokens of the first request)
        (_prompt(3, 10), SamplingParams(max_tokens=30, seed=1), None),
        (_prompt(25, 11), SamplingParams(max_tokens=4, temperature=0.7), 2),
        (_prompt(7, 12), SamplingParams(max_tokens=12, temperature=0), 5),
        (_prompt(40, 13), SamplingParams(max_tokens=20, top_k=20, top_p=0.9, seed=3), 9),
        (_prompt(2, 14), SamplingParams(max_tokens=2), 9),
    ]

    async def run():
        tasks = [None] * len(specs)

        def start(index):
            prompt, params, _ = specs[index]
            tasks[index] = asyncio.ensure_future(sampler.sample(prompt_token_ids=prompt, params=params))

        triggers = {}
        for index, (_, _, after) in enumerate(specs[1:], start=1):
            triggers.setdefault(after, []).append(index)
        seen = []

        def on_token(token_id, logprob):
            seen.append(token_id)
            for index in triggers.get(len(seen), []):
                start(index)

        prompt, params, _ = specs[0]
        tasks[0] = asyncio.ensure_future(sampler.sample(prompt_token_ids=prompt, params=params, on_token=on_token))
        first = await tasks[0]
        return [first] + [await task for task in tasks[1:]]

    results = asyncio.run(run())

    for (prompt, params, _), result in zip(specs, results):
        assert len(result.token_ids) == params.max_tokens
        expected = _expected_logprobs(model, prompt, result, params.temperature)
        torch.testing.assert_close(torch.tensor(result.logprobs), expected, atol=1e-4, rtol=0)
        if params.temperature == 0:
            assert list(result.token_ids) == _reference_logits(model, prompt, result.token_ids).argmax(-1).tolist()


def test_seeded_request_gives_the_same_tokens_alone_or_with_others_joining(sampler):
    prompt = _prompt(6, 21)
    seeded = SamplingParams(max_tokens=15, seed=77, top_k=50)
    (alone,) = _sample_all(sampler, [(prompt, seeded)])

    async def crowded():
        others = []

        def join():
            for index in range(3):
                others.append(asyncio.ensure_future(sampler.sample(
                    prompt_token_ids=_prompt(10 + index, index), params=SamplingParams(max_tokens=4 + index)
                )))

        early = asyncio.ensure_future(sampler.sample(prompt_token_ids=_prompt(30, 5), params=SamplingParams(max_tokens=3)))
        result = await sampler.sample(prompt_token_ids=prompt, params=seeded, on_token=_after_tokens(4, join))
        await asyncio.gather(early, *others)
        return result

    assert asyncio.run(crowded()).token_ids == alone.token_ids


def test_on_token_streams_exactly_the_final_tokens_in_order(sampler):
    streamed = []

    async def run():
        return await sampler.sample(
            prompt_token_ids=_prompt(5, 31), params=SamplingParams(max_tokens=9),
            on_token=lambda token_id, logprob: streamed.append((token_id, logprob)),
        )

    result = asyncio.run(run())

    assert streamed == list(zip(result.token_ids, result.logprobs))


def test_cancelling_a_caller_frees_its_row(model):
    sampler = HFLocalSampler(model, max_batch_size=1)
    streamed = []

    async def run():
        long = None

        def on_token(token_id, logprob):
            streamed.append(token_id)
            if len(streamed) == 3:
                long.cancel()

        long = asyncio.ensure_future(
            sampler.sample(prompt_token_ids=_prompt(4, 1), params=SamplingParams(max_tokens=4000), on_token=on_token)
        )
        await asyncio.sleep(0)
        short = await sampler.sample(prompt_token_ids=_prompt(4, 2), params=SamplingParams(max_tokens=2))
        return long, short

    try:
        long, short = asyncio.run(run())
    finally:
        sampler.close()
    assert long.cancelled() and len(short.token_ids) == 2
    assert len(streamed) < 10  # the row left at the next step, it did not decode on


def _hold_at_forward(sampler, call):
    """The sampler's worker stops before its `call`-th forward pass (the row in flight stays in
    flight) until the returned event is set (or 10 s pass)."""
    forward, calls, gate = sampler._forward, [], threading.Event()

    def held(**inputs):
        calls.append(None)
        if len(calls) == call:
            gate.wait(timeout=10)
        return forward(**inputs)

    sampler._forward = held
    return gate


def test_publish_weights_returns_at_once_and_swaps_once_the_rows_in_flight_finish(model):
    """A trainer publishing new weights does not wait for the rows in flight (its next update
    overlaps them): the swap lands when the last one ends, a request sent meanwhile waits for it,
    and every result was sampled under the one version it reports."""
    sampler = HFLocalSampler(model)
    gate = _hold_at_forward(sampler, 3)  # the prefill and one decode step: two tokens, then held
    events = []

    async def run():
        loop = asyncio.get_running_loop()
        long = await _long_row_started(sampler, seed=1)
        long.add_done_callback(lambda _: events.append("long done"))
        sampler.publish_weights(model, policy_version=5)  # on the loop: waiting here would stall it
        events.append(f"published, serving {sampler.policy_version}")
        settled = loop.run_in_executor(None, lambda: (sampler.settle(), sampler.policy_version)[1])
        late = asyncio.ensure_future(sampler.sample(
            prompt_token_ids=_prompt(4, 2), params=SamplingParams(max_tokens=2),
            on_token=_after_tokens(1, lambda: events.append("late started")),
        ))
        gate.set()
        return await long, await late, await settled

    try:
        long, late, settled_version = asyncio.run(run())
    finally:
        gate.set()
        sampler.close()
    assert events == ["published, serving 0", "long done", "late started"]
    assert long.policy_version == 0 and len(long.token_ids) == 20
    assert late.policy_version == 5 and settled_version == 5 == sampler.policy_version


def test_set_policy_version_waits_for_the_rows_and_lands_after_a_pending_publish(model):
    sampler = HFLocalSampler(model)
    gate = _hold_at_forward(sampler, 3)

    async def run():
        loop = asyncio.get_running_loop()
        long = await _long_row_started(sampler, seed=3)
        sampler.publish_weights(model, policy_version=1)
        relabel = loop.run_in_executor(None, lambda: sampler.set_policy_version(2))
        gate.set()
        await relabel
        return sampler.policy_version, await long

    try:
        version, long = asyncio.run(run())
    finally:
        gate.set()
        sampler.close()
    assert version == 2 and long.policy_version == 0  # the older publish landed first, not over it


# -- prefix caching -------------------------------------------------------------------------------

SYSTEM = _prompt(64, 1000)  # a shared "system prompt + few-shot examples"


def _fresh_model(tiny_model_dir):
    """A private copy of the tiny model, for tests that change weights."""
    return load_model(tiny_model_dir)


def _run_chain(sampler, first_prompt, suffixes, seed):
    """A multi-turn session: each prompt is the previous prompt + its completion + that turn's suffix."""
    prompt, turns = list(first_prompt), []
    for turn, suffix in enumerate(suffixes):
        params = SamplingParams(max_tokens=6, seed=seed + turn)
        (result,) = _sample_all(sampler, [(prompt, params)])
        turns.append((prompt, result))
        prompt = prompt + list(result.token_ids) + suffix
    return turns


def test_multi_turn_logprobs_with_the_prefix_cache_equal_uncached_and_a_plain_forward(model):
    cached, uncached = HFLocalSampler(model), HFLocalSampler(model, prefix_cache_tokens=0)
    suffixes = [_prompt(7, 1), _prompt(9, 2), []]
    try:
        before = cached.prefill_tokens
        with_cache = _run_chain(cached, SYSTEM + _prompt(8, 3), suffixes, seed=40)
        fed = cached.prefill_tokens - before
        without_cache = _run_chain(uncached, SYSTEM + _prompt(8, 3), suffixes, seed=40)
    finally:
        cached.close()
        uncached.close()

    for (prompt, result), (_, reference) in zip(with_cache, without_cache):
        assert result.token_ids == reference.token_ids
        torch.testing.assert_close(torch.tensor(result.logprobs), torch.tensor(reference.logprobs), atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(result.logprobs), _expected_logprobs(model, prompt, result),
                                   atol=1e-4, rtol=0)
    # turns 2 and 3 feed only the last sampled token of the turn before plus the suffix
    assert fed == len(with_cache[0][0]) + (1 + 7) + (1 + 9)
    assert uncached.prefill_tokens == sum(len(prompt) for prompt, _ in without_cache)


@pytest.mark.parametrize("prefix_cache_tokens", [32768, 0])
def test_identical_prompts_admitted_together_are_prefilled_once(model, prefix_cache_tokens):
    sampler = HFLocalSampler(model, batch_wait_s=0.05, prefix_cache_tokens=prefix_cache_tokens)
    prompt = SYSTEM + _prompt(10, 4)
    requests = [(prompt, SamplingParams(max_tokens=5, seed=seed)) for seed in range(6)]
    try:
        results = _sample_all(sampler, requests)
    finally:
        sampler.close()

    assert sampler.batches_run == 1 and sampler.prefill_tokens == len(prompt)
    assert len({result.token_ids for result in results}) > 1  # each row still samples on its own
    for result in results:
        torch.testing.assert_close(torch.tensor(result.logprobs), _expected_logprobs(model, prompt, result),
                                   atol=1e-4, rtol=0)


def test_questions_sharing_a_system_prompt_prefill_it_once(model):
    sampler = HFLocalSampler(model, batch_wait_s=0.05)
    questions = [SYSTEM + _prompt(10, 100 + index) for index in range(4)]
    late_question = SYSTEM + _prompt(12, 200)
    try:
        together = _sample_all(sampler, [(prompt, SamplingParams(max_tokens=4)) for prompt in questions])
        fed_together = sampler.prefill_tokens
        (late,) = _sample_all(sampler, [(late_question, SamplingParams(max_tokens=4, temperature=0))])
        fed_late = sampler.prefill_tokens - fed_together
    finally:
        sampler.close()

    assert fed_together == len(SYSTEM) + 4 * 10
    assert fed_late == 12
    for prompt, result in zip(questions + [late_question], together + [late]):
        torch.testing.assert_close(torch.tensor(result.logprobs), _expected_logprobs(model, prompt, result),
                                   atol=1e-4, rtol=0)


def test_the_cache_stays_within_its_token_budget(model):
    sampler = HFLocalSampler(model, prefix_cache_tokens=100)
    prompts = [_prompt(40, 300 + index) for index in range(5)]
    sizes = []
    try:
        for prompt in prompts:  # each leaves 40 + 2 fed tokens behind: two entries fit
            _sample_all(sampler, [(prompt, SamplingParams(max_tokens=3, temperature=0))])
            sizes.append(sampler.cached_prefix_tokens)
        fed = sampler.prefill_tokens
        _sample_all(sampler, [(prompts[-1] + [7], SamplingParams(max_tokens=1))])  # recent: a hit
        fed_recent = sampler.prefill_tokens - fed
        _sample_all(sampler, [(prompts[0] + [7], SamplingParams(max_tokens=1))])  # evicted long ago
        fed_evicted = sampler.prefill_tokens - fed - fed_recent
    finally:
        sampler.close()

    assert max(sizes) <= 100 and sampler.cached_prefix_tokens <= 100
    assert fed == 5 * 40 and fed_recent == 1 and fed_evicted == 41


def test_seeded_samples_are_the_same_with_or_without_a_cache_hit(model):
    sampler = HFLocalSampler(model)
    prompt = SYSTEM + _prompt(5, 6)
    seeded = SamplingParams(max_tokens=10, seed=321, top_k=40)
    try:
        (cold,) = _sample_all(sampler, [(prompt, seeded)])
        fed = sampler.prefill_tokens
        (warm,) = _sample_all(sampler, [(prompt, seeded)])
    finally:
        sampler.close()
    assert sampler.prefill_tokens - fed == 1 and warm.token_ids == cold.token_ids


def _perturbed(tiny_model_dir, scale):
    model = _fresh_model(tiny_model_dir)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * scale)
    return model


def test_weight_changes_invalidate_the_cache(tiny_model_dir):
    model, other = _fresh_model(tiny_model_dir), _perturbed(tiny_model_dir, 0.05)
    sampler = HFLocalSampler(model)
    prompt = SYSTEM + _prompt(6, 7)
    greedy = SamplingParams(max_tokens=4, temperature=0)

    def check(current):
        fed = sampler.prefill_tokens
        (result,) = _sample_all(sampler, [(prompt, greedy)])
        torch.testing.assert_close(torch.tensor(result.logprobs), _expected_logprobs(current, prompt, result),
                                   atol=1e-4, rtol=0)
        return sampler.prefill_tokens - fed

    try:
        assert check(model) == len(prompt)
        assert check(model) == 1  # a hit
        sampler.publish_weights(other, policy_version=1)
        assert sampler.cached_prefix_tokens == 0
        assert check(other) == len(prompt)
        sampler.set_policy_version(2)  # the trainer's path after editing weights in place
        assert sampler.cached_prefix_tokens == 0
        assert check(other) == len(prompt)
        with sampler.lock, torch.no_grad():  # an in-place edit nobody announced
            for parameter in other.parameters():
                parameter.mul_(1.1)
        assert check(other) == len(prompt)
    finally:
        sampler.close()


def test_a_peft_model_wrapped_in_place_samples_exact_logprobs(tiny_model_dir):
    peft = pytest.importorskip("peft")
    model = _fresh_model(tiny_model_dir)
    sampler = HFLocalSampler(model)
    prompt = SYSTEM + _prompt(6, 8)
    try:
        _sample_all(sampler, [(prompt, SamplingParams(max_tokens=3))])  # fills the cache with base-model KV
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():
            for name, parameter in wrapped.named_parameters():
                if "lora_B" in name:
                    parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
        sampler.publish_weights(wrapped.get_base_model(), policy_version=1)  # the same object, now with adapters
        results = _sample_all(sampler, [(prompt, SamplingParams(max_tokens=5, seed=seed)) for seed in range(2)])
        (again,) = _sample_all(sampler, [(prompt + [9], SamplingParams(max_tokens=5, seed=3))])  # a hit under LoRA
    finally:
        sampler.close()
    for result in results:
        torch.testing.assert_close(torch.tensor(result.logprobs), _expected_logprobs(model, prompt, result),
                                   atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(again.logprobs), _expected_logprobs(model, prompt + [9], again),
                               atol=1e-4, rtol=0)


def test_negative_prefix_cache_tokens_is_refused(model):
    with pytest.raises(ValueError, match="prefix_cache_tokens"):
        HFLocalSampler(model, prefix_cache_tokens=-1)


def test_score_gives_the_logprobs_a_sample_recorded(sampler):
    prompt = _prompt(12, seed=7)
    sampled = asyncio.run(sampler.sample(prompt_token_ids=prompt, params=SamplingParams(temperature=0.8, max_tokens=6, seed=3)))
    scored = asyncio.run(sampler.score(prompt_token_ids=prompt, completion_token_ids=sampled.token_ids, temperature=0.8))
    assert scored == pytest.approx(sampled.logprobs, abs=1e-4)
    with pytest.raises(SamplingError, match="non-empty prompt and completion"):
        asyncio.run(sampler.score(prompt_token_ids=prompt, completion_token_ids=[]))


def test_score_reuses_the_cached_conversation_and_matches_a_plain_forward_pass(model):
    """Teacher-forced turns of one conversation: the second score computes only what the first did
    not (its KV is cached), and both equal a forward pass over the whole sequence."""
    sampler = HFLocalSampler(model, prefix_cache_tokens=4096)
    try:
        first_prompt, first_reply = _prompt(40, seed=11), _prompt(6, seed=12)
        second_prompt = first_prompt + first_reply + _prompt(9, seed=13)
        second_reply = _prompt(5, seed=14)
        first = asyncio.run(sampler.score(prompt_token_ids=first_prompt, completion_token_ids=first_reply, temperature=0.7))
        computed = sampler.prefill_tokens
        assert computed == len(first_prompt) + len(first_reply)
        second = asyncio.run(sampler.score(prompt_token_ids=second_prompt, completion_token_ids=second_reply, temperature=0.7))
        assert sampler.prefill_tokens - computed == len(second_prompt) + len(second_reply) - len(first_prompt + first_reply)
        for prompt, reply, scored in ((first_prompt, first_reply, first), (second_prompt, second_reply, second)):
            logits = _reference_logits(model, prompt, reply) / 0.7
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(reply).unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(torch.tensor(scored), expected, atol=1e-4, rtol=0)
    finally:
        sampler.close()


def test_a_bfloat16_model_is_served_with_fp32_attention_over_an_fp32_cache(tiny_model_dir):
    """CPU flash attention in bfloat16 is several times slower than in fp32 (bench/RESULTS.md: "Where a decode
    step goes"): the sampler keeps the cache in fp32 and runs attention in fp32, matmuls in bf16."""
    from agentcore_rl_harness.samplers import _fp32_attention, _kv

    model = load_model(tiny_model_dir, dtype="bfloat16")
    sampler = HFLocalSampler(model, batch_wait_s=0.02)
    try:
        requests = [(_prompt(length, seed), SamplingParams(temperature=temperature, max_tokens=6, seed=seed))
                    for seed, (length, temperature) in enumerate(zip([3, 11, 20], [1.0, 0.0, 0.7]))]
        results = _sample_all(sampler, requests)
    finally:
        sampler.close()
    assert model.config._attn_implementation == _fp32_attention.NAME
    for (prompt, params), result in zip(requests, results):
        # the reference: one plain forward of the same bf16 model over an fp32 cache
        cache = _kv.new_cache(float32=True)
        sequence = list(prompt) + list(result.token_ids)
        with torch.inference_mode():
            logits = model(torch.tensor([sequence]), cache=cache, use_cache=True).logits[0].float()
        assert cache.layers[0].keys.dtype == torch.float32
        logits = logits[len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits / (params.temperature or 1.0), dim=-1)
        expected = expected.gather(-1, torch.tensor(result.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(result.logprobs), expected, atol=2e-2, rtol=0)


def test_fp32_attention_leaves_a_forward_without_cache_and_fp32_models_alone(tiny_model_dir, model):
    from agentcore_rl_harness.samplers import _fp32_attention

    assert not _fp32_attention.low_precision(model)  # fp32: served as it is
    bf16 = load_model(tiny_model_dir, dtype="bfloat16")
    ids = torch.tensor([_prompt(12, 3)])
    with torch.inference_mode():
        before = bf16(ids).logits
        _fp32_attention.use_fp32_attention(bf16)
        after = bf16(ids).logits  # no cache: keys are bf16, so attention is plain bf16 SDPA
    assert _fp32_attention.low_precision(bf16)
    assert torch.equal(before, after)


async def _long_row_started(sampler, *, seed):
    """A 20-token row sampled in the background, returned once its first two tokens are out."""
    started = asyncio.Event()
    long = asyncio.ensure_future(sampler.sample(
        prompt_token_ids=_prompt(4, seed), params=SamplingParams(max_tokens=20),
        on_token=_after_tokens(2, started.set),
    ))
    await started.wait()
    return long
