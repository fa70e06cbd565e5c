"""`WeightSync`: one name for publishing new weights, on every sampler a trainer updates."""

import inspect

import pytest

from agentcore_rl_harness.gateway.sampling import WeightSync
from agentcore_rl_harness.samplers.hf_local import HFLocalSampler
from agentcore_rl_harness.samplers.sagemaker import SageMakerSampler
from agentcore_rl_harness.samplers.tinker import TinkerSampler


@pytest.mark.parametrize("sampler_class", [HFLocalSampler, TinkerSampler, SageMakerSampler])
def test_every_trained_sampler_publishes_weights_the_same_way(sampler_class):
    method = getattr(sampler_class, "publish_weights")
    parameters = inspect.signature(method).parameters
    assert list(parameters)[2:] == ["policy_version"]
    assert parameters["policy_version"].kind is inspect.Parameter.KEYWORD_ONLY


def test_publish_weights_switches_the_client():
    pytest.importorskip("tinker")
    sampler = TinkerSampler(None, policy_version=0)
    assert isinstance(sampler, WeightSync)
    first, second = object(), object()
    sampler.publish_weights(first, policy_version=1)
    assert (sampler.sampling_client, sampler.policy_version) == (first, 1)
    sampler.publish_weights(second, policy_version=2)
    assert (sampler.sampling_client, sampler.policy_version) == (second, 2)


def test_the_trainers_publish_through_the_protocol_name_only():
    from pathlib import Path

    import agentcore_rl_harness.trainers as trainers

    for path in Path(trainers.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        for old in ("swap_model(", "swap_client(", "sampler.swap("):
            assert old not in text, f"{path.name} still calls {old}"
