"""One case -> one episode: a gateway session, one agent session on the runtime, its traces.

`EpisodeRunner` takes its parts (a gateway, an `AgentRuntime`) as arguments, so it runs against the
shipped fakes (`samplers.scripted`, `runtimes.fake`) as it does against a model and real agents.
Sampled tokens are never lost: the gateway session is finished whatever the agent did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..config import HarnessConfig
from ..errors import HarnessError, failure_text
from ..records import SamplingParams, SessionOutcome, Status, TaskLimits
from ..runtimes.base import AgentRef, AgentRuntime
from ..tasks import build_payload, rollout_block
from .cases import DEMO_PHASE, EVAL_PHASES, Case, Episode, HeldResources, case_seed
from .loop import LoopThread
from .sandbox import FinalSandbox, Sandbox
from .sanity import AgentPlan, add_oracle_result, plan_agent

# Gateway refusals (4xx) that are the agent's doing: a failure after one stays the agent's.
AGENT_SIDE_EVENTS = ("context_length_exceeded", "context_budget_exhausted")


class GatewaySessions(Protocol):
    """What a case needs of the gateway's session store (`gateway.sessions.SessionStore`)."""

    def open(self, *, session_id: str, sampling: SamplingParams) -> Any: ...
    # also `script=` (assistant turns to teacher-force) and `score_forced=` (their logprobs
    # under the policy, or zeros) when a case runs a scripted oracle

    def finish(self, session_id: str) -> Any: ...  # a FinishedSession


def attribute_failure(outcome: SessionOutcome, metadata: dict[str, Any]) -> SessionOutcome:
    """Whose fault a failed session is, from the gateway's session events.

    An agent that failed (or timed out) after the gateway itself failed one of its requests
    (5xx: a sampler or gateway error, counted as `gateway_errors`) did not get a fair chance:
    that is an infrastructure error. A failure after a refusal the agent caused (a prompt over
    the model's context, a 4xx) stays the agent's, even if 5xx errors happened too.
    """
    if outcome.status not in (Status.AGENT_ERROR, Status.TIMEOUT):
        return outcome
    gateway_errors = int(metadata.get("gateway_errors", 0) or 0)
    agent_side = {name: int(metadata.get(name, 0) or 0) for name in AGENT_SIDE_EVENTS}
    agent_side = {name: count for name, count in agent_side.items() if count}
    if agent_side:
        said = ", ".join(f"{name} x{count}" for name, count in agent_side.items())
        return SessionOutcome(
            status=outcome.status, result=outcome.result,
            error=f"{outcome.error} (the gateway refused this session's requests: {said})",
            elapsed_s=outcome.elapsed_s,
        )
    if gateway_errors:
        return SessionOutcome(
            status=Status.INFRA_ERROR,
            result=outcome.result,
            error=f"the gateway failed {gateway_errors} request(s) of this session "
            f"(sampler or gateway error; see the log); the agent then reported: {outcome.error}",
            elapsed_s=outcome.elapsed_s,
        )
    return outcome


def limit_outcome(outcome: SessionOutcome, limits: TaskLimits, metadata: dict[str, Any], *,
                  timed_out_by_task: bool) -> SessionOutcome:
    """`limit_exceeded`, naming the limit, when the episode ran into one of its task's limits
    (`task.*` in the session's `limits_hit`, or a timeout at the task's stricter `timeout_s`);
    the harness's or the task code's failure keeps its own status."""
    if outcome.status in (Status.INFRA_ERROR, Status.TASK_ERROR):
        return outcome
    hit = [name for name in metadata.get("limits_hit") or () if name.startswith("task.")]
    if outcome.status is Status.TIMEOUT and timed_out_by_task:
        hit.append("task.timeout_s")
    if not hit:
        return outcome
    named = ", ".join(f"{name.removeprefix('task.')}={getattr(limits, name.removeprefix('task.'))}" for name in hit)
    ended = outcome.status.value + (f": {outcome.error}" if outcome.error else "")
    return dataclasses.replace(outcome, status=Status.LIMIT_EXCEEDED, error=(
        f"limit_exceeded: task limit {named} (@arl.task(limits=...)); the agent then ended {ended}"))


def new_session_id() -> str:
    """An unguessable session key, 44 chars (ACR wants 33-256)."""
    return "arl-" + secrets.token_hex(20)


@dataclass(frozen=True)
class CaseSettings:
    """What a case's session is run with (from `sampling`, `seed`, `agent`, `eval`, `runtime`)."""

    model_id: str
    base_url: str  # the gateway URL agents are given (gateway.public_url, else its own)
    sampling: SamplingParams
    seed: int = 0
    eval_sampling: SamplingParams | None = None  # evaluation phases' (`eval.temperature`); None: `sampling`
    agent: str = "task"
    timeout_s: float = 300.0
    concurrency: int = 8

    @classmethod
    def of(cls, config: HarnessConfig, *, model_id: str, base_url: str) -> CaseSettings:
        """A run's settings, from its `sampling`, `eval`, `seed`, `agent` and `runtime` nodes."""
        return cls(model_id=model_id, base_url=base_url, sampling=config.sampling.to_params(),
                   eval_sampling=config.eval_sampling(), seed=config.seed, agent=config.agent,
                   timeout_s=config.eval.timeout_s, concurrency=config.runtime.concurrency)

    def sampling_for(self, case: Case) -> SamplingParams:
        """An evaluation case's sampling is `eval_sampling` when set; training cases keep `sampling`."""
        if self.eval_sampling is not None and case.phase in EVAL_PHASES:
            return self.eval_sampling
        return self.sampling


class EpisodeRunner:
    """Runs cases on `runtime`, sampling through `sessions`; at most `concurrency` at once."""

    def __init__(self, *, sessions: GatewaySessions, runtime: AgentRuntime, settings: CaseSettings,
                 loop: LoopThread | None = None) -> None:
        """`loop`: the thread running this runner's loop, which `sandbox.sync` blocks on."""
        self.sessions = sessions
        self.loop = loop
        self.runtime = runtime
        self.settings = settings
        self._slots: asyncio.Semaphore | None = None  # made on the loop that runs the cases
        self._held: list[HeldResources] = []
        self._live: dict[int, tuple[str, float]] = {}  # id(case) -> (session id, wall start)

    async def run(self, case: Case) -> Episode:
        """Run one case when a session slot is free (bounds live gateway + agent sessions)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.concurrency)
        async with self._slots:
            episode = await self._run(case)
        if episode.held:  # the runtime kept something past the session (its sandbox)
            self._held = [held for held in self._held if not held.released]
            self._held.append(episode.held)
        return episode

    async def _run(self, case: Case) -> Episode:
        settings = self.settings
        session_id = new_session_id()
        sampling = settings.sampling_for(case)
        seeded = replace(sampling, seed=case_seed(settings.seed, case))
        started = time.monotonic()
        agent, planning_failed = self._plan(case)
        forced = {}
        if agent is not None and agent.script is not None:
            # A warm-up demonstration is trained on its tokens alone (cross-entropy): scoring the
            # forced turns under the policy would cost a forward pass per turn for nothing.
            forced = {"script": agent.script, "score_forced": case.phase != DEMO_PHASE}
        limits = case.spec.limits
        if limits:
            forced["task_limits"] = limits
        timeout_s = self.settings.timeout_s if limits.timeout_s is None else min(limits.timeout_s, self.settings.timeout_s)
        self.sessions.open(session_id=session_id, sampling=seeded, **forced)
        rollout_info = rollout_block(
            base_url=settings.base_url, model_id=settings.model_id, session_id=session_id,
            sampling=sampling,
        )
        # Resources kept past the agent's answer (the session's sandbox, for the task to inspect)
        # are held here and released once the rollout is scored.
        held = HeldResources()
        self._live[id(case)] = (session_id, time.time())  # in flight (`session_of`, inflight.json)
        try:
            outcome = planning_failed if agent is None else await self._invoke(
                case, agent, session_id, rollout_info, started, timeout_s)
        finally:
            self._live.pop(id(case), None)
            finished = self.sessions.finish(session_id)
        sandbox = None
        if case.spec.needs_sandbox:  # the runtime kept the session (ACR: still live) until scored
            final = FinalSandbox(self.runtime, outcome, session_id=session_id)
            held.hold(final.aclose)
            sandbox = Sandbox(final, loop=self.loop)
        return Episode(
            sandbox=sandbox,
            case=case,
            session_id=session_id,
            outcome=limit_outcome(attribute_failure(outcome, finished.metadata), limits, finished.metadata,
                                  timed_out_by_task=timeout_s < self.settings.timeout_s),
            traces=tuple(finished.traces),
            turns=finished.turns,
            usage=finished.usage,
            session_metadata=dict(finished.metadata),
            held=held,
        )

    def _plan(self, case: Case) -> tuple[AgentPlan | None, SessionOutcome | None]:
        """The case's agent (and script), or the task's failure to name one (a bad oracle)."""
        try:
            return plan_agent(case.spec, case.row, case.agent or self.settings.agent), None
        except Exception as exc:  # the task's oracle (or its _script) is bad: the task's fault
            return None, SessionOutcome(status=Status.TASK_ERROR, result=None, elapsed_s=0.0,
                                        error="the task's oracle failed: " + failure_text(exc))

    async def _invoke(
        self, case: Case, agent: AgentPlan, session_id: str, rollout_info: dict[str, Any], started: float,
        timeout_s: float,
    ) -> SessionOutcome:
        """Build the payload (task code: its errors fail the task) and run the agent session."""
        try:
            payload = build_payload(case.spec, case.row, rollout_info)
            add_oracle_result(agent, payload)
        except Exception as exc:  # the task's payload callable or its row: the task's fault
            return SessionOutcome(
                status=Status.TASK_ERROR, result=None,
                error="building the invoke payload failed: " + failure_text(exc),
                elapsed_s=time.monotonic() - started,
            )
        keep = {"keep_state": case.spec.needs_sandbox}
        try:
            return await self.runtime.run_session(
                agent=AgentRef(task=case.spec.name, agent=agent.agent, input_id=case.row_id, phase=case.phase,
                               mcp_servers=case.spec.mcp_servers, environment=case.spec.environment_path()),
                session_id=session_id,
                payload=payload,
                timeout_s=timeout_s,
                **keep,
            )
        except HarnessError as exc:
            return SessionOutcome(
                status=Status.INFRA_ERROR, result=None, error=f"{type(exc).__name__}: {exc}",
                elapsed_s=time.monotonic() - started,
            )

    def live_sessions(self) -> int:
        return self.runtime.live_sessions

    def session_of(self, case: Case) -> tuple[str, float] | None:
        """The session id and wall-clock start of `case` while its agent session runs."""
        return self._live.get(id(case))

    async def release_all(self) -> None:
        """Release what episodes still hold (the run ends before some were scored)."""
        held, self._held = self._held, []
        for resources in held:
            await resources.release()
