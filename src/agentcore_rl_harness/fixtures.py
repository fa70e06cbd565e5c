"""The fixtures a task test may ask for; thin wrappers over the run core (`run.core.Run`).

`plugin.py` re-exports them, so pytest finds them on the registered plugin module.
"""

from __future__ import annotations

from typing import Any

import pytest

from .config import HarnessConfig
from .errors import SandboxError
from .pytest_outcomes import run_of
from .run.backend import Backend
from .run.core import Run
from .run.extra_sessions import ExtraSessions
from .run.plan import MODES, TrainItem
from .run.sandbox import Sandbox
from .run.scoring import RolloutHandle

__all__ = ["_arl_case", "agentcore_rl_config", "agentcore_session", "backend", "gateway", "rollout", "row",
           "sandbox"]


@pytest.fixture
def _arl_case(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def agentcore_rl_config(request: pytest.FixtureRequest) -> HarnessConfig:
    """The composed, typed config of this run."""
    return _require(request).config.typed


@pytest.fixture
def row(_arl_case) -> dict | None:
    """The dataset row of this case (None for the one item of a task in `train` mode)."""
    return None if isinstance(_arl_case, TrainItem) else dict(_arl_case.row)


@pytest.fixture
def rollout(request: pytest.FixtureRequest, _arl_case) -> RolloutHandle | None:
    """This case's rollout while the test body judges it: a handle on the finished episode
    (waits for it; `.result`, `.traces`); set `.reward` to override scoring."""
    if isinstance(_arl_case, TrainItem):
        return None  # train mode: the item reports on training, its body is not run
    return _require(request).rollout_for(request.node.nodeid)


@pytest.fixture
def gateway(request: pytest.FixtureRequest):
    """The rollout gateway server of this run (`.base_url`, `.sessions`)."""
    return _require(request).parts().started().gateway


@pytest.fixture
def agentcore_session(request: pytest.FixtureRequest, _arl_case) -> ExtraSessions:
    """Run extra agent sessions by hand: `agentcore_session.run(payload)` -> RolloutHandle."""
    return ExtraSessions(_require(request).parts().started(), _arl_case)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """The run's sampling backend: `.model_name`, `.policy_version`, `.sample(prompt)`,
    `.score(prompt, completion)` (await `.asample` / `.ascore` in `async def` code)."""
    return _require(request).parts().started().backend()  # starts model, sampler, gateway


@pytest.fixture
def sandbox(rollout: RolloutHandle | None) -> Sandbox:
    """The rollout's session after its agent answered (`rollout.sandbox`, which rewards use):
    locally its final files in a sandbox isolated like the session, on AgentCore the session
    itself, kept live (`sandbox.sync.exec([...])`, `.sync.get_file(path)`; await the same methods
    in `async def` tests). Released (an ACR session stopped) once the rollout is scored."""
    try:
        return rollout.sandbox  # type: ignore[union-attr]
    except (AttributeError, SandboxError) as exc:
        pytest.fail(
            "the sandbox fixture has no session here: it serves task tests of a live run "
            f"(a resumed run's finished rollouts keep no session): {exc}", pytrace=False)


def _require(request: pytest.FixtureRequest) -> Run:
    run = run_of(request.config)
    if run is None:
        pytest.skip(
            f"agentcore-rl fixture: run it with `pytest --agentcore-rl MODE` (modes: {', '.join(MODES)})"
        )
    return run
