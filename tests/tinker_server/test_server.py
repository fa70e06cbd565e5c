"""The Tinker server driven only through the real, unmodified `tinker` SDK (plus raw HTTP for
malformed requests)."""

import numpy as np
import pytest
import torch


tinker = pytest.importorskip("tinker")
types = tinker.types


def _datum(tokens, **inputs):
    """Next-token datum: input tokens[:-1], targets tokens[1:]."""
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": np.array(tokens[1:], dtype=np.int64), **inputs})


def _torch_logprobs(model, tokens):
    """log p(tokens[i] | tokens[:i]) for i >= 1, from a plain torch forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens[:-1]])).logits[0].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[1:]).unsqueeze(-1)).squeeze(-1).numpy()


def _lora(service_client, seed=0):
    return service_client.create_lora_training_client(base_model="tiny", rank=4, seed=seed).result()


def test_importance_sampling_loss_and_logprobs_match_torch(service_client, tokenizer, base_model):
    training = _lora(service_client)
    info = training.get_info()
    assert info.is_lora and info.lora_rank == 4
    rng = np.random.default_rng(0)
    sequences = [tokenizer.encode("The cat sat on the mat."), tokenizer.encode("2 + 2 = 4")]
    data, expected_loss = [], 0.0
    for tokens in sequences:
        sampler_logprobs = rng.normal(-3.0, 0.5, len(tokens) - 1).astype(np.float32)
        advantages = rng.normal(0.0, 1.0, len(tokens) - 1).astype(np.float32)
        data.append(_datum(tokens, logprobs=sampler_logprobs, advantages=advantages))
        reference = _torch_logprobs(base_model, tokens)  # fresh LoRA (B = 0): the base model
        expected_loss += float(-(np.exp(reference - sampler_logprobs) * advantages).sum())

    result = training.forward_backward(data, "importance_sampling").result()

    for tokens, output in zip(sequences, result.loss_fn_outputs):
        np.testing.assert_allclose(output["logprobs"].to_numpy(), _torch_logprobs(base_model, tokens), atol=1e-4)
    assert result.metrics["loss:sum"] == pytest.approx(expected_loss, rel=1e-4, abs=1e-4)

    step = training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert step.metrics["grad_norm"] > 0
    after = training.forward(data, "importance_sampling").result()
    moved = np.abs(after.loss_fn_outputs[0]["logprobs"].to_numpy() - result.loss_fn_outputs[0]["logprobs"].to_numpy())
    assert moved.max() > 1e-3, "optim_step did not change the weights"


def test_ppo_clips_the_ratio(service_client, tokenizer):
    training = _lora(service_client)
    tokens = tokenizer.encode("hello there")
    forward = training.forward([_datum(tokens, weights=np.ones(len(tokens) - 1, np.float32))], "cross_entropy").result()
    current = forward.loss_fn_outputs[0]["logprobs"].to_numpy()
    advantages = np.ones(len(tokens) - 1, np.float32)
    far_below = (current - 5.0).astype(np.float32)  # ratio e^5, clipped to 1.2 for positive advantages
    result = training.forward_backward([_datum(tokens, logprobs=far_below, advantages=advantages)], "ppo").result()
    assert result.metrics["loss:sum"] == pytest.approx(-1.2 * (len(tokens) - 1), rel=1e-4)
    custom = training.forward([_datum(tokens, logprobs=far_below, advantages=advantages)], "ppo",
                              {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result()
    assert custom.metrics["loss:sum"] == pytest.approx(-1.1 * (len(tokens) - 1), rel=1e-4)


def test_cross_entropy_trains_and_samplers_use_saved_weights(tinker_server, service_client, tokenizer, base_model):
    training = _lora(service_client, seed=1)
    prompt = tokenizer.encode("Q: color of the sky? A:")
    answer = tokenizer.encode(" blue blue blue")
    tokens = prompt + answer
    weights = np.array([0.0] * (len(prompt) - 1) + [1.0] * len(answer), dtype=np.float32)
    target_logprob = []
    for _ in range(8):
        result = training.forward_backward([_datum(tokens, weights=weights)], "cross_entropy").result()
        target_logprob.append(float((result.loss_fn_outputs[0]["logprobs"].to_numpy() * weights).sum()))
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    assert target_logprob[-1] > target_logprob[0] + 1.0, target_logprob

    trained = training.save_weights_and_get_sampling_client().result()
    base = service_client.create_sampling_client(base_model="tiny").result()
    greedy = types.SamplingParams(max_tokens=len(answer), temperature=0.0, stop=[])
    prompt_input = types.ModelInput.from_ints(prompt)
    trained_greedy = trained.sample(prompt_input, 1, greedy).result().sequences[0]
    base_greedy = base.sample(prompt_input, 1, greedy).result().sequences[0]
    assert trained_greedy.tokens == answer
    assert base_greedy.tokens != answer

    # Sampled logprobs equal a recompute: the base sampler against plain torch, the trained
    # sampler against the training model's own forward pass (its weights are the snapshot's).
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=7, stop=[])
    for sequence in base.sample(prompt_input, 2, params).result().sequences:
        recomputed = _torch_logprobs(base_model, prompt + list(sequence.tokens))[len(prompt) - 1:]
        np.testing.assert_allclose(sequence.logprobs, recomputed, atol=1e-4)
    sampled = trained.sample(prompt_input, 2, params).result().sequences
    for sequence in sampled:
        assert len(sequence.sequence_id) > 0
        check = training.forward([_datum(prompt + list(sequence.tokens))], "cross_entropy").result()
        np.testing.assert_allclose(sequence.logprobs, check.loss_fn_outputs[0]["logprobs"].to_numpy()[len(prompt) - 1:],
                                   atol=1e-4)

    # A snapshot keeps its weights while training goes on.
    live_before = training.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    training.forward_backward([_datum(tokens, weights=-weights)], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    live_after = training.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert np.abs(live_after - live_before).max() > 1e-2
    again = trained.sample(prompt_input, 1, greedy).result().sequences[0]
    assert again.tokens == answer
    np.testing.assert_allclose(again.logprobs, trained_greedy.logprobs, atol=1e-6)

    # Named sampler weights round-trip through disk.
    saved = training.save_weights_for_sampler("after-unlearning").result()
    assert saved.path.startswith("tinker://") and saved.path.endswith("/sampler_weights/after-unlearning")
    reloaded = service_client.create_sampling_client(model_path=saved.path).result()
    expected = training.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    logprobs = reloaded.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    assert logprobs[0] is None
    np.testing.assert_allclose(logprobs[1:], expected, rtol=1e-5, atol=1e-4)


def test_results_are_polled_with_try_again(tinker_server, service_client, tokenizer):
    sampler = service_client.create_sampling_client(base_model="tiny").result()
    before = tinker_server.futures.try_again_count
    result = sampler.sample(types.ModelInput.from_ints(tokenizer.encode("Once upon")), 2,
                            types.SamplingParams(max_tokens=24, stop=[], seed=3)).result()
    assert [len(sequence.tokens) for sequence in result.sequences] == [24, 24]
    assert {sequence.stop_reason for sequence in result.sequences} == {"length"}
    assert tinker_server.futures.try_again_count > before


def test_save_state_and_resume_with_optimizer(tinker_server, service_client, tokenizer):
    training = _lora(service_client, seed=2)
    tokens = tokenizer.encode("resume me")
    training.forward_backward([_datum(tokens)], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    state = training.save_state("step-1").result()
    assert state.path.endswith("/weights/step-1")

    resumed = service_client.create_training_client_from_state_with_optimizer(state.path).result()
    for client in (training, resumed):  # the same next step from the same weights and Adam moments
        client.forward_backward([_datum(tokens)], "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    original = training.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    restored = resumed.forward([_datum(tokens)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    np.testing.assert_allclose(restored, original, atol=1e-5)


def test_unknown_ids_are_404s_the_sdk_reports(tinker_server, service_client):
    import httpx

    with pytest.raises(tinker.NotFoundError, match="no checkpoint at tinker://"):
        service_client.create_sampling_client(model_path="tinker://missing:train:0/sampler_weights/x").result()
    headers = {"X-API-Key": tinker_server.api_key}
    response = httpx.post(f"{tinker_server.base_url}/api/v1/get_info", json={"model_id": "nope"}, headers=headers)
    assert response.status_code == 404 and "unknown model_id 'nope'" in response.json()["error"]
    response = httpx.post(f"{tinker_server.base_url}/api/v1/retrieve_future", json={"request_id": "req-0"},
                          headers=headers)
    assert response.status_code == 404 and "unknown future" in response.json()["error"]


def test_unsupported_loss_fails_the_request_clearly(service_client, tokenizer):
    training = _lora(service_client)
    with pytest.raises(tinker.BadRequestError, match="loss_fn 'cispo' is not implemented"):
        training.forward_backward([_datum(tokenizer.encode("a b c"))], "cispo").result()


def test_wrong_api_key_is_401(tinker_server):
    with pytest.raises(tinker.AuthenticationError, match="wrong API key"):
        tinker.ServiceClient(base_url=tinker_server.base_url, api_key="tml-wrong").create_lora_training_client(
            base_model="tiny", rank=4).result()


def test_oversized_body_is_413(tinker_server):
    import httpx

    response = httpx.post(f"{tinker_server.base_url}/api/v1/forward_backward", content=b"\0" * (2 * 1024 * 1024),
                          headers={"X-API-Key": tinker_server.api_key, "Content-Type": "application/x-protobuf"})
    assert response.status_code == 413 and "exceeds the limit" in response.json()["error"]


def test_malformed_protobuf_is_400(tinker_server):
    import httpx

    response = httpx.post(f"{tinker_server.base_url}/api/v1/forward_backward", content=b"\x0a\xff\xff\xff\xff\x0f",
                          headers={"X-API-Key": tinker_server.api_key, "Content-Type": "application/x-protobuf"})
    assert response.status_code == 400 and "not a ForwardBackwardRequest protobuf" in response.json()["error"]
