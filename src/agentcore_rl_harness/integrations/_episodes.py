"""One harness whose gateway samples through an external trainer's inference engine.

verl and slime own the policy weights and the inference servers; the harness contributes the
rest of an episode: the gateway (rendering, exact token capture, traces), the agent runtime and
the task's scoring. `RolloutRunner` builds a `run.compose.Harness` around a given
`SamplingBackend` and tokenizer (no weights are loaded here) and turns one (task, row, sample)
into one scored `Rollout` with the run core's `Scorer`, exactly as a `collect` run records it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import threading
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import HarnessConfig, SamplingConfig, compose_config
from ..gateway.sampling import SamplingBackend
from ..records import Rollout, Trace
from ..run.cases import Case
from ..run.compose import Harness
from ..run.scoring import Scorer
from ..run.training import EXCLUDED
from ..tasks import TaskSpec

CONFIG_ENV = "AGENTCORE_RL_CONFIG"
OVERRIDES_ENV = "AGENTCORE_RL_SET"


def harness_config(
    *, source: str | None, overrides: Sequence[str], trainer: str, temperature: float,
    top_p: float, top_k: int, max_tokens_cap: int | None = None,
) -> HarnessConfig:
    """The composed harness config with `trainer=<trainer>` and the external engine's sampling.

    The engine's temperature / top-p / top-k win (its trainer recomputes logprobs under them);
    a turn's `max_tokens` is the harness's `sampling.max_tokens`, capped by the engine's budget.
    """
    composed = compose_config(
        [f"trainer={trainer}", *overrides], source=Path(source) if source else None
    ).typed
    max_tokens = composed.sampling.max_tokens
    if max_tokens_cap is not None:
        max_tokens = min(max_tokens, max_tokens_cap)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, top_k=max(top_k, 0),
                              max_tokens=max_tokens)
    return dataclasses.replace(composed, sampling=sampling)


def overrides_from_env(text: str | None) -> list[str]:
    """Hydra overrides from `AGENTCORE_RL_SET` (shell-style words: `a=1 "b=[x, y]"`)."""
    return shlex.split(text or "")


class RolloutRunner:
    """Gateway + runtime over an external `SamplingBackend`; `submit` gives scored rollouts."""

    def __init__(
        self,
        config: HarnessConfig,
        *,
        sampler: SamplingBackend,
        tokenizer: Any,
        model_id: str,
        run_id: str,
        rollouts_dir: str | None = None,
    ) -> None:
        self.config = config
        self.run_id = run_id
        self.tokenizer = tokenizer
        self._indexes = itertools.count()
        # The engine's sampler and tokenizer replace the harness's own model; gateway and runtime
        # are started up front so the first sample does not pay for them.
        self.sampler = sampler
        harness = Harness(config, sampler=sampler, tokenizer=tokenizer, model_id=model_id)
        harness.start()
        self.harness = harness
        self.scorer = Scorer(run_id=run_id, call=harness.call, fixtures=harness.offline_fixtures)
        self._store = None
        if rollouts_dir:
            from ..store import RunStore

            self._store = RunStore(Path(rollouts_dir))

    def next_sample_index(self) -> int:
        """A process-unique sample index (it seeds the session; the engine's sampling decides)."""
        return next(self._indexes)

    def submit(self, case: Case) -> concurrent.futures.Future[Rollout]:
        """Run and score `case` on the harness's loop; usable from any thread."""
        return self.harness.loop.submit(self._run(case))

    async def run(self, case: Case) -> Rollout:
        """`submit` awaited from another event loop (verl's agent-loop worker)."""
        return await asyncio.wrap_future(self.submit(case))

    async def _run(self, case: Case) -> Rollout:
        episode = await self.harness.run_case(case)
        try:  # task code may block (or bridge back to this loop): a worker thread scores
            rollout = await asyncio.to_thread(self.scorer.score, case, episode)
        finally:
            await episode.held.release()
        if self._store is not None:
            self._store.append(rollout)
        return rollout

    def close(self) -> None:
        try:
            self.harness.close()
        finally:
            self.sampler.close()  # the engine's client, if any
            if self._store is not None:
                self._store.close()


_runners: dict[tuple[Any, ...], RolloutRunner] = {}
_runners_lock = threading.Lock()


def shared_runner(key: tuple[Any, ...], build: Any) -> RolloutRunner:
    """This process's runner for `key`, built once by `build()`: external engines call the
    rollout code per sample or per step, and one gateway + runtime serves them all."""
    with _runners_lock:
        if key not in _runners:
            _runners[key] = build()
        return _runners[key]


def close_runners() -> None:
    """Close this process's runners (tests; verl workers and slime actors simply exit)."""
    with _runners_lock:
        runners = list(_runners.values())
        _runners.clear()
    for runner in runners:
        runner.close()


def case_for(spec: TaskSpec, row: dict[str, Any], *, sample_index: int, phase: str,
             step: int | None = None) -> Case:
    return Case(spec=spec, row=row, sample_index=sample_index, phase=phase, step=step)


def is_failed(rollout: Rollout) -> bool:
    """A rollout that cannot be scored (the agent or the infrastructure failed, or no reward)."""
    return rollout.status in EXCLUDED


def trained_tokens(trace: Trace) -> int:
    return sum(1 for mask in trace.loss_mask if mask)
