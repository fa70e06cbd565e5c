"""The `agentcore` runtime: each session on AWS Bedrock AgentCore Runtime (ACR) through boto3.

Per session: InvokeAgentRuntime (the harness session key is the runtime session id), then the
result - the response body (`inline`: JSON, or the `data:` stream BedrockAgentCoreApp sends for
generators, whose last event is the result) or an S3 object the agent writes later (`s3`, the
agentcore-rl-toolkit contract, see `_s3_results.py`), or (`start_get`) an addressable
invocation the agent started in the background, read with `get` invokes on the same session
until it ends (agentcore-rl-toolkit's `AgentCoreRuntimeApp`, see `_invocations.py`) - then
StopRuntimeSession, on every exit path: success, failure, timeout, cancellation and `aclose()`.
`sandbox(session_id)` runs commands and moves files in a session through
InvokeAgentRuntimeCommand (`_acr_commands.py`); its background commands are killed before the stop.
With `keep_state=True` a completed session is not stopped at once: it stays live (and counted
in `live_sessions`, but not against `concurrency`, so scoring can never wait on it) until its
task is scored (`release`) or the runtime closes.
The S3 triple (`exp_id`, `input_id`, `s3_bucket`) is sent only in the `s3` mode.

InvokeAgentRuntime is not idempotent: boto3's default retries ran one agent handler three times
after a single 500. The clients built here never retry on their own
(`retries={"total_max_attempts": 1}`); the runtime resends an invoke only after an error proving
the agent did not run (throttling, HTTP 429, service unavailable, connection refused), with
exponential backoff, and says how many attempts it made when it gives up. A `SessionLimiter`
(`limits.py`: this process's own, or one shared by the job's processes through Ray) paces
invokes and stops together with one token bucket per runtime ARN (ACR's default quota is 25 TPS
per ARN) and caps live sessions, serving evaluation sessions before training rollouts. The session timeout counts from the moment the session gets a
live-session slot (submission), so cold start is included. boto3 is synchronous: every call
runs in the runtime's own thread pool, sized so long inline invokes cannot starve stops and polls.

Long because one ACR session's life (invoke, its result in one of three modes, resends, the stop
on every exit path, its command sandbox) shares the runtime's clients, per-ARN token buckets,
slot semaphore and thread pool. The parts that do not need that state are modules of their own:
`_invocations.py` and `_s3_results.py` (result modes), `_retry.py` (the resend policy), `limits.py`
(pacing and slots), `_acr_calls.py` and `_acr_commands.py` (the boto3 calls, commands).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import logging
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, MissingDependencyError, RuntimeStartError, SandboxError
from ..mcp_servers import stdio_only
from ..records import SessionOutcome, Status
from . import _invocations as invocations
from .agentcore_config import AgentCoreRuntimeConfig
from .limits import STOP_PRIORITY, Priorities, SessionLimiter, build_limiter
from ._retry import Backoff, GaveUp, retry_call
from .base import AgentRef, AgentRuntime

if TYPE_CHECKING:
    from ._acr_commands import AcrSessionSandbox
    from ._acr_kept import KeptAcrSession

logger = logging.getLogger(__name__)

RESULT_MODES = invocations.RESULT_MODES
DEFAULT_ARN_KEY = "*"
SESSION_ID_LENGTH = (33, 256)
_ACCEPTED_STATES = ("accepted", "processing")

ClientFactory = Callable[[str, str], Any]
"""`(service_name, region_name) -> boto3 client`; clients from a factory keep their own retries."""


def region_of(arn: str) -> str:
    """The region field of an ARN (`arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>`)."""
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn" or not parts[3]:
        raise ConfigError(
            f"{arn!r} is not an AgentCore runtime ARN "
            "(arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>); copy it from "
            "`aws bedrock-agentcore-control list-agent-runtimes`"
        )
    return parts[3]


class AgentCoreRuntime(AgentRuntime):
    """Runs each session on Bedrock AgentCore Runtime; implements `AgentRuntime`."""

    def __init__(
        self,
        config: AgentCoreRuntimeConfig,
        *,
        client_factory: ClientFactory | None = None,
        limiter: SessionLimiter | None = None,
        priorities: Priorities | None = None,
    ) -> None:
        """`config` is the `runtime` node (`agentcore_config.py`: ARNs, quotas, result mode, the
        limiter's keys). `client_factory` makes the boto3 clients (tests: stubs); `limiter`
        holds the quotas (default: the one `config` names, `tps_per_arn` per ARN and
        `concurrency` live sessions); `priorities` orders the sessions waiting for them
        (default: `config.priorities`, evaluation before training)."""
        if not config.arns:
            raise ConfigError(
                "runtime.arns is empty; map each task to its AgentCore runtime ARN, e.g. "
                "--agentcore-rl-set '+runtime.arns.test_arith=arn:aws:bedrock-agentcore:...'"
            )
        config.validate()
        self.config = config
        self.arns = dict(config.arns)
        self.regions = {task: config.region or region_of(arn) for task, arn in self.arns.items()}
        self.qualifier, self.concurrency = config.qualifier, config.concurrency
        self.result_mode, self.s3_bucket = config.result_mode, config.s3_bucket
        self.exp_id = config.exp_id or (
            f"arl-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"
        )
        self.backoff = Backoff(attempts=config.max_invoke_attempts, initial_s=config.retry_backoff_s,
                               max_s=config.retry_backoff_max_s)
        """The resend policy of invokes and stops (only errors proving the agent did not run)."""
        self.stats: Counter[str] = Counter()
        """Counts: invokes, invoke_retries, stops, stop_failures."""
        self._calls, self._s3 = _load_aws_modules()
        make_client = client_factory or _default_client_factory(
            endpoint_url=config.endpoint_url, s3_endpoint_url=config.s3_endpoint_url,
            read_timeout_s=config.read_timeout_s, max_pool_connections=config.concurrency * 2 + 4,
        )
        self._clients = {
            reg: make_client("bedrock-agentcore", reg) for reg in sorted(set(self.regions.values()))
        }
        self._results = None
        if config.result_mode == "s3":
            s3_region = config.region or sorted(set(self.regions.values()))[0]
            self._results = self._s3.S3ResultReader(
                client=make_client("s3", s3_region), bucket=config.s3_bucket, call=self._call,
                poll_initial_s=config.poll_initial_s, poll_max_s=config.poll_max_s,
                poll_backoff=config.poll_backoff,
            )
        self.limiter: SessionLimiter = limiter or build_limiter(
            config.limiter, tps_per_arn={arn: config.tps_per_arn for arn in set(self.arns.values())},
            concurrency=config.concurrency,
        )
        self.priorities = priorities or Priorities(by_task=dict(config.priorities))
        self._slots = asyncio.Semaphore(config.concurrency)  # this process's share (its threads)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.concurrency * 2 + 4, thread_name_prefix="arl-agentcore"
        )
        self._live: dict[str, tuple[str, str]] = {}  # session id -> (arn, region)
        self._sandboxes: dict[str, AcrSessionSandbox] = {}
        self._sandbox_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    @classmethod
    def for_run(cls, config: AgentCoreRuntimeConfig, *, private_dirs: tuple[Path, ...] = (),
                session_timeout_s: float | None = None) -> AgentCoreRuntime:
        """The run's runtime (`registry.py`): an inline invoke's read outlasts the session timeout;
        `runtime.limits` it cannot apply are named (`_session_caps.check_agentcore_limits`)."""
        from ._session_caps import check_agentcore_limits

        check_agentcore_limits(config.limits)
        if session_timeout_s is not None and config.read_timeout_s < session_timeout_s + 60:
            config = dataclasses.replace(config, read_timeout_s=session_timeout_s + 60)
        return cls(config)

    # -- the AgentRuntime seam --------------------------------------------------------------------

    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float,
        keep_state: bool = False,
    ) -> SessionOutcome:
        """`keep_state`: a session that completed stays live (not stopped) for its task to
        inspect through `kept(...)`/`sandbox(...)`, until `release(session_id)` or `aclose()`."""
        arn, region = self._target(agent.task)
        low, high = SESSION_ID_LENGTH
        if not low <= len(session_id) <= high:
            raise ValueError(
                f"session id {session_id!r} has {len(session_id)} characters; AgentCore needs "
                f"{low}-{high}"
            )
        priority = self.priorities.of(agent)
        async with self._slots, self.limiter.slot(priority=priority):
            if self._closed:
                raise RuntimeStartError(
                    "AgentCoreRuntime is closed; create a new one to run sessions"
                )
            started = time.monotonic()
            self._live[session_id] = (arn, region)
            progress = self._s3.PollProgress()
            kept = False
            try:
                try:
                    async with asyncio.timeout(timeout_s):
                        result = await self._session(
                            arn, region, agent, session_id, payload, progress, priority
                        )
                except TimeoutError:
                    return _outcome(
                        Status.TIMEOUT,
                        None,
                        f"session {session_id} on {arn} did not finish within {timeout_s:g}s "
                        "(counted from submission, cold start included)"
                        + _poll_note(progress, self.s3_bucket),
                        started,
                    )
                except self._calls.SessionFailed as failure:
                    return _outcome(failure.status, None, f"{failure.error} [{arn}]", started)
                kept = keep_state
                return _outcome(Status.COMPLETED, result, None, started)
            finally:
                if not kept:
                    await self._stop_whatever_happens(session_id)

    def kept(self, outcome: SessionOutcome, *, session_id: str) -> KeptAcrSession:
        """The session `run_session(keep_state=True)` kept live, for its task; stopped at its
        `aclose()`."""
        from ._acr_kept import KeptAcrSession

        return KeptAcrSession(self, outcome, session_id=session_id)

    async def release(self, session_id: str) -> None:
        """Stop a kept session (its background commands killed first); a stopped one: no-op."""
        await self._stop_whatever_happens(session_id)

    async def aclose(self) -> None:
        """Stop every live session, wait for pending stops; later `run_session` calls raise."""
        self._closed = True
        for session_id in list(self._live):
            self._spawn_stop(session_id)
        if self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)
        for sandbox in list(self._sandboxes.values()):
            await sandbox.aclose()
        self._sandboxes.clear()
        await self.limiter.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._sandbox_executor is not None:
            self._sandbox_executor.shutdown(wait=False, cancel_futures=True)

    def notes(self, *, agents: Sequence[AgentRef]) -> list[str]:
        """runtime.limits keys and each task's environment: ACR applies its own (`_acr_environments`)."""
        from ._acr_environments import environment_notes, limits_notes
        return limits_notes(self.config.limits) + environment_notes(
            agents, arn_of=lambda task: self.arns.get(task, self.arns.get(DEFAULT_ARN_KEY)))

    @property
    def live_sessions(self) -> int:
        return len(self._live)

    def sandbox(self, session_id: str, *, task: str | None = None) -> AcrSessionSandbox:
        """Shell and files in session `session_id` while it is live (SandboxError otherwise).

        `task` addresses a session this runtime is not running (its ARN from `runtime.arns`).
        """
        if self._closed:
            raise SandboxError("AgentCoreRuntime is closed; its sessions' sandboxes are gone")
        if session_id in self._sandboxes:
            return self._sandboxes[session_id]
        if session_id in self._live:
            arn, region = self._live[session_id]
        elif task is not None:
            arn, region = self._target(task)
        else:
            raise SandboxError(
                f"no live AgentCore session {session_id!r}: a sandbox exists only while its "
                "session runs (or pass task= to address a session by its task's runtime ARN)"
            )
        from ._acr_commands import AcrSessionSandbox

        if self._sandbox_executor is None:  # long commands must not starve invokes and stops
            self._sandbox_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.concurrency * 2 + 4, thread_name_prefix="arl-agentcore-sandbox"
            )
        sandbox = AcrSessionSandbox(
            self._clients[region], arn, session_id, qualifier=self.qualifier,
            backoff=self.backoff, executor=self._sandbox_executor,
        )
        self._sandboxes[session_id] = sandbox
        return sandbox

    # -- one session ------------------------------------------------------------------------------

    def _target(self, task: str) -> tuple[str, str]:
        key = task if task in self.arns else DEFAULT_ARN_KEY
        if key not in self.arns:
            raise ConfigError(
                f"task {task!r} has no AgentCore runtime ARN; set runtime.arns.{task}=<arn> "
                f"(or runtime.arns.'*' for every task); mapped tasks: {sorted(self.arns)}"
            )
        return self.arns[key], self.regions[key]

    async def _session(
        self,
        arn: str,
        region: str,
        agent: AgentRef,
        session_id: str,
        payload: dict[str, Any],
        progress: Any,
        priority: int,
    ) -> dict[str, Any]:
        body, key = self._payload_bytes(agent, session_id, payload)
        reply = await self._invoke(arn, region, session_id, body, priority)
        answer = self._calls.parse_result(reply)
        if self._results is not None and answer.get("status") in _ACCEPTED_STATES:
            return await self._results.wait(str(answer.get("result_key") or key), progress)

        async def get(invocation_id: str) -> Any:
            request = json.dumps(invocations.get_payload(invocation_id)).encode()
            return self._calls.parse_result(
                await self._invoke(arn, region, session_id, request, priority)
            )

        try:
            return await invocations.settle(
                answer, get=get, poll_initial_s=self.config.poll_initial_s, poll_max_s=self.config.poll_max_s
            )
        except invocations.InvocationFailed as failure:
            raise self._calls.SessionFailed(Status.AGENT_ERROR, str(failure)) from None

    def _payload_bytes(
        self, agent: AgentRef, session_id: str, payload: dict[str, Any]
    ) -> tuple[bytes, str | None]:
        rollout = {**(payload.get("_rollout") or {}), "session_id": session_id, **stdio_only(agent.mcp_servers)}
        payload, key = invocations.prepare_payload(
            {**payload, "_rollout": rollout}, result_mode=self.result_mode, exp_id=self.exp_id,
            bucket=self.s3_bucket, session_id=session_id,
            input_id=str(agent.input_id or rollout.get("input_id") or agent.task),
        )
        try:
            body = json.dumps(payload).encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the payload of session {session_id} is not JSON: {exc}") from exc
        return body, key

    async def _invoke(
        self, arn: str, region: str, session_id: str, body: bytes, priority: int
    ) -> Any:
        async def attempt() -> Any:
            await self.limiter.pace(arn=arn, priority=priority)
            self.stats["invokes"] += 1
            return await self._call(self._calls.invoke, self._clients[region], arn=arn, session_id=session_id,
                                    qualifier=self.qualifier, payload=body)

        def resending(failure: Any, next_attempt: int) -> None:
            self.stats["invoke_retries"] += 1
            logger.info(
                "session %s: %s; the agent did not run, resending (attempt %d of %d)",
                session_id, failure.code, next_attempt, self.backoff.attempts,
            )

        try:
            return await retry_call(
                attempt,
                backoff=self.backoff,
                classify=lambda exc: self._calls.describe_failure(exc, "InvokeAgentRuntime"),
                on_retry=resending,
            )
        except GaveUp as gave_up:
            raise self._calls.SessionFailed(
                gave_up.failure.status,
                f"{gave_up.failure.text} (attempt {gave_up.attempts} of at most "
                f"{self.backoff.attempts})",
            ) from None

    # -- stopping ---------------------------------------------------------------------------------

    async def _stop_whatever_happens(self, session_id: str) -> None:
        """Stop the session; if this task is cancelled meanwhile, the stop still completes."""
        task = self._spawn_stop(session_id)
        if task is not None:
            await asyncio.shield(task)

    def _spawn_stop(self, session_id: str) -> asyncio.Task[None] | None:
        target = self._live.pop(session_id, None)
        if target is None:
            return None
        task = asyncio.get_running_loop().create_task(self._stop(session_id, *target))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return task

    async def _stop(self, session_id: str, arn: str, region: str) -> None:
        sandbox = self._sandboxes.pop(session_id, None)
        if sandbox is not None:
            try:
                await sandbox.aclose()
            except Exception as exc:
                logger.warning("session %s: background commands not killed: %s", session_id, exc)
        client_token = str(uuid.uuid4())

        async def attempt() -> None:
            await self.limiter.pace(arn=arn, priority=STOP_PRIORITY)
            self.stats["stops"] += 1
            await self._call(self._calls.stop, self._clients[region], arn=arn, session_id=session_id,
                             qualifier=self.qualifier, client_token=client_token)

        try:
            await retry_call(
                attempt,
                backoff=self.backoff,
                classify=lambda exc: self._calls.describe_failure(exc, "StopRuntimeSession"),
            )
            return
        except GaveUp as gave_up:
            if gave_up.failure.code == "ResourceNotFoundException":
                logger.debug("session %s was already gone when stopped", session_id)
                return
            reason = gave_up.failure.text
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        self.stats["stop_failures"] += 1
        logger.warning(
            "could not stop AgentCore session %s on %s: %s; it ends at the runtime's "
            "idle timeout instead (the rollout is unaffected)",
            session_id, arn, reason,
        )

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))


def _outcome(status: Status, result: Any, error: str | None, started: float) -> SessionOutcome:
    return SessionOutcome(
        status=status, result=result, error=error, elapsed_s=time.monotonic() - started
    )


def _poll_note(progress: Any, bucket: str | None) -> str:
    if progress.key is None:
        return ""
    note = f"; the result s3://{bucket}/{progress.key} was never written ({progress.polls} polls"
    if progress.forbidden:
        note += f", {progress.forbidden} answered 403: check s3:GetObject/s3:ListBucket"
    return note + ")"


def _load_aws_modules() -> tuple[Any, Any]:
    try:
        import boto3  # noqa: F401
        import botocore  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            "runtime=agentcore needs boto3: pip install 'agentcore-rl-harness[aws]'"
        ) from exc
    from . import _acr_calls, _s3_results

    return _acr_calls, _s3_results


def _default_client_factory(
    *,
    endpoint_url: str | None,
    s3_endpoint_url: str | None,
    read_timeout_s: float,
    max_pool_connections: int,
) -> ClientFactory:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    no_retries = Config(
        retries={"total_max_attempts": 1},
        read_timeout=read_timeout_s,
        connect_timeout=10,
        max_pool_connections=max_pool_connections,
    )
    s3_config = Config(
        retries={"mode": "standard", "total_max_attempts": 3},
        max_pool_connections=max_pool_connections,
    )

    def make(service_name: str, region_name: str) -> Any:
        if service_name == "s3":
            return session.client(
                "s3", region_name=region_name, endpoint_url=s3_endpoint_url, config=s3_config
            )
        return session.client(
            service_name, region_name=region_name, endpoint_url=endpoint_url, config=no_retries
        )

    return make
