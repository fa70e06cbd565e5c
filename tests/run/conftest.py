"""Fixtures of the run core's tests: harnesses over `ScriptedSampler` and `FakeRuntime` (helpers in
run_fakes.py; `scripted_harness` is in tests/conftest.py)."""

from __future__ import annotations

import pytest
from run_fakes import FAST, ask_gateway

from agentcore_rl_harness.runtimes.fake import FakeRuntime


@pytest.fixture
def build_harness(scripted_harness):
    """Harnesses over the fakes: `scripted_harness` on a `FakeRuntime` running `handler`."""

    def build(*overrides, handler=ask_gateway, replies=None, trainer=None):
        return scripted_harness([*FAST, *overrides], runtime=FakeRuntime(handler), replies=replies,
                                trainer=trainer)

    return build
