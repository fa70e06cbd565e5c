"""`TinkerSampler` with real tinker 0.38 types and a fake `SamplingClient` returning real responses."""

from __future__ import annotations

import asyncio
import sys

import pytest

tinker = pytest.importorskip("tinker")

from agentcore_rl_harness.errors import MissingDependencyError, SamplingError  # noqa: E402
from agentcore_rl_harness.gateway.sampling import SamplingBackend  # noqa: E402
from agentcore_rl_harness.records import FinishReason, SampleResult, SamplingParams  # noqa: E402
from agentcore_rl_harness.samplers.tinker import TinkerSampler  # noqa: E402


class FakeSamplingClient:
    """Answers `sample_async` like tinker's SamplingClient, with `tinker.types` objects."""

    def __init__(self, sequence=None, error=None):
        self.sequence, self.error, self.calls = sequence, error, []

    async def sample_async(self, *, prompt, num_samples, sampling_params):
        self.calls.append((prompt, num_samples, sampling_params))
        if self.error is not None:
            raise self.error
        return tinker.types.SampleResponse(sequences=[self.sequence] if self.sequence else [])


def sequence(tokens, logprobs, stop_reason="stop"):
    return tinker.types.SampledSequence(stop_reason=stop_reason, sequence_id="seq-0", _tokens_list=tokens,
                                        _logprobs_list=logprobs)


def _sample(sampler, on_token=None, **params):
    return asyncio.run(sampler.sample(prompt_token_ids=[1, 2, 3], params=SamplingParams(**params), on_token=on_token))


def test_request_is_built_from_real_tinker_types():
    sampler = TinkerSampler(FakeSamplingClient())
    request = sampler.request([1, 2, 3], SamplingParams(temperature=0.6, top_p=0.9, top_k=0, max_tokens=12,
                                                        stop_token_ids=(2, 7), seed=5))
    assert isinstance(request["prompt"], tinker.ModelInput) and request["prompt"].to_ints() == [1, 2, 3]
    assert request["num_samples"] == 1
    assert request["sampling_params"] == tinker.SamplingParams(max_tokens=12, seed=5, stop=[2, 7], temperature=0.6,
                                                               top_k=-1, top_p=0.9)
    assert sampler.request([1], SamplingParams(top_k=40))["sampling_params"].top_k == 40


def test_sample_returns_tokens_and_logprobs_and_replays_callbacks():
    client = FakeSamplingClient(sequence([11, 12, 2], [-0.5, -0.25, -0.125]))
    sampler = TinkerSampler(client, policy_version=3)
    assert isinstance(sampler, SamplingBackend)
    seen = []
    result = _sample(sampler, on_token=lambda t, lp: seen.append((t, lp)), top_k=40)
    assert result == SampleResult((11, 12, 2), (-0.5, -0.25, -0.125), FinishReason.STOP, policy_version=3)
    assert seen == [(11, -0.5), (12, -0.25), (2, -0.125)]
    assert client.calls[0][2].top_k == 40
    assert _sample(TinkerSampler(FakeSamplingClient(sequence([1], [-1.0], "length")))).finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize("client, match", [
    (FakeSamplingClient(sequence([11, 12], None)), "2 tokens but no logprobs"),
    (FakeSamplingClient(), "no sequences"),
    (FakeSamplingClient(error=tinker.TinkerError("boom")), "Tinker sampling failed: TinkerError: boom"),
])
def test_unusable_results_are_sampling_errors(client, match):
    with pytest.raises(SamplingError, match=match):
        _sample(TinkerSampler(client))


def test_missing_sdk_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "tinker", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'tinker>=0.38,<0.39'"):
        TinkerSampler(FakeSamplingClient())


class FakeScoringClient:
    """Answers `compute_logprobs` like tinker 0.38's SamplingClient (an awaitable, None first)."""

    def __init__(self):
        self.calls = []

    def compute_logprobs(self, prompt, prompt_logprobs_last_n=None):
        self.calls.append((prompt.to_ints(), prompt_logprobs_last_n))

        async def result():
            return [None] + [-0.1 * i for i in range(1, len(prompt.to_ints()))]

        return result()


def test_score_is_compute_logprobs_of_the_completion_tail():
    client = FakeScoringClient()
    scored = asyncio.run(TinkerSampler(client).score(prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5]))
    assert client.calls == [([1, 2, 3, 4, 5], 2)]
    assert scored == pytest.approx((-0.3, -0.4))
    with pytest.raises(SamplingError, match="temperature 1 only"):
        asyncio.run(TinkerSampler(client).score(prompt_token_ids=[1], completion_token_ids=[2], temperature=0.5))
