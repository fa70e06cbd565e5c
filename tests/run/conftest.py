"""Fixtures of the run core's tests: the tiny model's tokenizer (no weights) and harnesses over
`ScriptedSampler` and `FakeRuntime` (helpers in run_fakes.py)."""

from __future__ import annotations

import pytest
from run_fakes import FAST, ask_gateway

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.run.compose import Harness
from agentcore_rl_harness.runtimes.fake import FakeRuntime
from agentcore_rl_harness.samplers.scripted import ScriptedSampler


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def build_harness(tokenizer):
    """Harnesses over the fakes: replies alternate "4" / "5" (so groups are rarely constant)."""
    made = []

    def build(*overrides, handler=ask_gateway, replies=None, trainer=None):
        config = compose_config([*FAST, *overrides]).typed
        counter = iter(range(10**6))
        sampler = ScriptedSampler(replies or (lambda prompt, params: "4" if next(counter) % 2 == 0 else "5"),
                                  encode=tokenizer.encode)
        harness = Harness(config, sampler=sampler, tokenizer=tokenizer, model_id="tiny-test",
                          runtime=FakeRuntime(handler), trainer=trainer)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()
