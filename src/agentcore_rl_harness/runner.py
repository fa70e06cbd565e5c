"""The runner: owns the harness's event loop, the sampler, the gateway and the runtime, and turns
one case (task, row, sample) into one episode.

Everything async runs on one background event loop thread (`LoopThread`); pytest's thread only
submits work and waits on futures (the one sync bridge).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .config import HarnessConfig
from .errors import ConfigError, HarnessError, failure_text
from .records import SessionOutcome, Status
from .run.backend import Backend
from .run.cases import Case, Episode, case_seed
from .run.sanity import add_oracle_result, agent_for
from .runtimes.base import AgentRef, AgentRuntime
from .tasks import TaskSpec, build_payload, rollout_block

log = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """An asyncio loop on a daemon thread; `submit` schedules a coroutine from any thread."""

    def __init__(self, name: str = "agentcore-rl-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(_cancel_all(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
            self.loop.close()


def check_public_gateway_url(url: str, *, serves_plain_http: bool = False, bound_to: str = "127.0.0.1",
                             tls_terminated_upstream: bool = False) -> str:
    """ACR sessions run in AWS: a loopback gateway URL can never be reached from there, and their
    session keys are bearer credentials that must not cross a network in clear text: a plain
    HTTP URL, or a gateway serving plain HTTP on a non-loopback address, is refused unless the
    user states that TLS is terminated in front of it (`gateway.tls_terminated_upstream`)."""
    import ipaddress
    from urllib.parse import urlsplit

    from .gateway.server import is_loopback

    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
        loopback = address.is_loopback or address.is_unspecified
    except ValueError:
        loopback = host in ("localhost", "localhost.localdomain") or host.endswith(".localhost")
    if loopback:
        raise ConfigError(
            f"runtime=agentcore: the gateway URL sessions would use is {url}, which AgentCore "
            "cannot reach; set gateway.host=0.0.0.0 (or a private interface) and "
            "gateway.public_url=https://<reachable host>/v1 (README: Reaching the gateway from "
            "AgentCore)"
        )
    plain = urlsplit(url).scheme == "http" or (serves_plain_http and not is_loopback(bound_to))
    if plain and not tls_terminated_upstream:
        raise ConfigError(
            f"runtime=agentcore: session keys would travel in clear text (advertised URL {url}, "
            f"gateway serving plain HTTP on {bound_to}); serve TLS with gateway.tls.certfile and "
            "gateway.tls.keyfile, or terminate TLS in front (load balancer, tunnel) and set "
            "gateway.tls_terminated_upstream=true (README: Reaching the gateway from AgentCore)"
        )
    return url


# Gateway refusals (4xx) that are the agent's doing: a failure after one stays the agent's.
AGENT_SIDE_EVENTS = ("context_length_exceeded", "context_budget_exhausted")


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


def new_session_id() -> str:
    """An unguessable session key, 44 chars (ACR wants 33-256)."""
    return "arl-" + secrets.token_hex(20)


class Harness:
    """Sampler + gateway + runtime for one pytest session. Start lazily, close once."""

    def __init__(
        self,
        config: HarnessConfig,
        *,
        progress: Any = None,
        sampler: Any = None,
        tokenizer: Any = None,
        model_id: str | None = None,
        private_dirs: tuple[Path, ...] = (),
    ) -> None:
        """`sampler` (with `tokenizer`) plugs in an external engine's `SamplingBackend` (verl,
        slime): no weights are loaded here, and the harness never closes that sampler.
        `private_dirs` (the run directory) are hidden from isolated agent sessions."""
        if sampler is not None and tokenizer is None:
            raise ConfigError("an external sampler needs the tokenizer that renders its prompts")
        self.config = config
        self.private_dirs = tuple(Path(p).resolve() for p in private_dirs)
        self._external = (sampler, tokenizer, model_id) if sampler is not None else None
        self.loop = LoopThread()
        self._progress = progress or (lambda message: None)
        self._sampler: Any = None
        self.renderer: Any = None  # the policy's chat template, shared by the gateway and the backend
        self.gateway: Any = None
        self.runtime: AgentRuntime | None = None
        self.model_id = ""
        self._start_lock = threading.Lock()
        self._model: Any = None
        self._context_window: int | None = None  # from the model folder, when there is one
        self._trainer: Any = None
        self.advertised_url = ""
        self._slots: asyncio.Semaphore | None = None

    def start(self) -> None:
        with self._start_lock:
            if self.gateway is not None:
                return
            from .gateway.rendering import ChatTemplateRenderer
            from .gateway.server import GatewayConfig, GatewayServer

            cfg = self.config
            started = time.monotonic()
            tokenizer, where = self._load_policy()
            self.model_id = (self._external and self._external[2]) or cfg.model.name
            self.renderer = ChatTemplateRenderer(tokenizer)
            self.gateway = GatewayServer(
                sampler=self._sampler,
                renderer=self.renderer,
                model_id=self.model_id,
                config=GatewayConfig(
                    host=cfg.gateway.host,
                    port=cfg.gateway.port,
                    max_body_bytes=cfg.gateway.max_body_bytes,
                    sampling=cfg.sampling.to_params(),
                    history=cfg.gateway.history,
                    gc_freeze=cfg.gateway.gc_freeze,
                    lenient_history=cfg.gateway.lenient_history,
                    tls_certfile=cfg.gateway.tls.certfile,
                    tls_keyfile=cfg.gateway.tls.keyfile,
                    admin_port=cfg.gateway.admin_port,
                    failed_key_limit=cfg.gateway.failed_key_limit,
                    keep_alive_s=cfg.gateway.keep_alive_s,
                    context_window_tokens=getattr(getattr(self._model, "config", None),
                                                  "max_position_embeddings", None) or self._context_window,
                    max_turns=cfg.gateway.max_turns,
                    idle_ttl_s=cfg.gateway.idle_ttl_s,
                    max_lifetime_s=cfg.gateway.max_lifetime_s,
                    context_budget_tokens=cfg.gateway.context_budget_tokens,
                ),
            )
            self.gateway.start()
            self.runtime = self._build_runtime()
            self._progress(
                f"agentcore-rl: model {cfg.model.name} ({where}) loaded, gateway at "
                f"{self.gateway.base_url} in {time.monotonic() - started:.1f}s"
            )

    def _load_policy(self) -> tuple[Any, str]:
        """Set up the sampler the gateway uses; return the tokenizer and where the policy lives.

        External engine: its sampler as given. Service trainer (Tinker, SageMaker): the service
        holds the weights, only the tokenizer is loaded. Otherwise the in-process model.
        """
        if self._external is not None:
            self._sampler, tokenizer, _ = self._external
            return tokenizer, "external sampler"
        from .models import context_window, load_model, load_tokenizer, resolve_model

        cfg = self.config
        model_dir = resolve_model(cfg.model.name)
        self._context_window = context_window(model_dir)
        tokenizer = load_tokenizer(model_dir)
        spec = self._trainer_spec()
        if spec is not None and spec.kind == "service":
            self._trainer = spec.load_factory()(
                section=cfg.trainer, model_dir=model_dir, tokenizer=tokenizer, config=cfg
            )
            self._sampler = self._trainer.sampler
            return tokenizer, f"trainer={cfg.trainer.trainer.kind} service; tokenizer {model_dir}"
        from .samplers.hf_local import HFLocalSampler

        self._model = load_model(model_dir, dtype=cfg.model.dtype)
        self._sampler = HFLocalSampler(
            self._model,
            max_batch_size=cfg.sampler.max_batch_size,
            batch_wait_s=cfg.sampler.batch_wait_s,
            prefix_cache_tokens=cfg.sampler.prefix_cache_tokens,
        )
        return tokenizer, str(model_dir)

    def _build_runtime(self) -> AgentRuntime:
        cfg, runtime = self.config, self.config.runtime
        if runtime.kind == "agentcore":
            from .runtimes.agentcore import AgentCoreRuntime

            self.advertised_url = check_public_gateway_url(
                cfg.gateway.public_url or self.gateway.base_url,
                serves_plain_http=self.gateway.base_url.startswith("http:"),
                bound_to=cfg.gateway.host,
                tls_terminated_upstream=cfg.gateway.tls_terminated_upstream,
            )
            return AgentCoreRuntime(
                arns=dict(runtime.arns), region=runtime.region, qualifier=runtime.qualifier,
                concurrency=runtime.concurrency, tps_per_arn=runtime.tps_per_arn,
                result_mode=runtime.result_mode, s3_bucket=runtime.s3_bucket,
                exp_id=runtime.exp_id, endpoint_url=runtime.endpoint_url,
                s3_endpoint_url=runtime.s3_endpoint_url,
                max_invoke_attempts=runtime.max_invoke_attempts,
                read_timeout_s=max(runtime.read_timeout_s, cfg.eval.timeout_s + 60),
                poll_initial_s=runtime.poll_initial_s, poll_max_s=runtime.poll_max_s,
            )
        from .runtimes.local import LocalRuntime

        self.advertised_url = cfg.gateway.public_url or self.gateway.base_url
        from .runtimes.isolation import IsolationChoice

        isolation = IsolationChoice(
            kind=runtime.isolation, limits=runtime.limits,
            hidden=(*map(Path, runtime.hidden_paths), *self.private_dirs),
            readable=tuple(map(Path, runtime.readable_paths)),
        )
        return LocalRuntime(
            isolation=isolation,
            start_method=runtime.start_method,
            concurrency=runtime.concurrency,
            startup_timeout_s=runtime.startup_timeout_s,
            env_passthrough=tuple(runtime.env_passthrough),
            result_mode=runtime.result_mode,
            s3_bucket=runtime.s3_bucket,
            exp_id=runtime.exp_id,
        )

    def _trainer_spec(self) -> Any:
        if self.config.trainer is None:
            return None
        from .trainers.registry import spec_for

        return spec_for(self.config.trainer.trainer.kind)

    def trainer(self) -> Any:
        """The configured trainer: in-process ones share the policy model with the sampler."""
        self.start()
        if self._trainer is None:
            spec = self._trainer_spec()
            if spec is None:
                raise ConfigError("no trainer is configured (the `trainer` config group is missing)")
            if spec.kind == "external":
                raise ConfigError(spec.load_factory())
            self._trainer = spec.load_factory()(self._model, sampler=self._sampler, section=self.config.trainer)
        return self._trainer

    def backend(self) -> Backend:
        """The run's sampling backend for task code: the gateway's sampler and renderer."""
        self.start()
        return Backend(sampler=self._sampler, renderer=self.renderer, loop=self.loop,
                       model_name=self.model_id, sampling=self.config.sampling.to_params())

    def train_plan(self) -> Any:
        from .training import TrainPlan

        loop = self.config.trainer.loop
        return TrainPlan(
            steps=loop.steps,
            batch_rows=loop.batch_rows,
            group_size=loop.group_size,
            checkpoint_every=loop.checkpoint_every,
            seed=self.config.seed,
        )

    def submit(self, case: Case) -> concurrent.futures.Future[Episode]:
        self.start()
        return self.loop.submit(self.run_case(case))

    async def run_case(self, case: Case) -> Episode:
        """Run one case when a session slot is free (bounds live gateway + agent sessions)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.config.runtime.concurrency)
        async with self._slots:
            return await self._run_case(case)

    async def _run_case(self, case: Case) -> Episode:
        """Open a gateway session, run the agent once, collect its traces. Never loses tokens."""
        assert self.gateway is not None and self.runtime is not None
        cfg = self.config
        session_id = new_session_id()
        params = cfg.sampling.to_params()
        seeded = type(params)(**{**params.__dict__, "seed": case_seed(cfg.seed, case)})
        self.gateway.sessions.open(session_id=session_id, sampling=seeded)
        rollout_info = rollout_block(
            base_url=self.advertised_url, model_id=self.model_id, session_id=session_id,
            sampling=params,
        )
        started = time.monotonic()
        try:
            outcome = await self._invoke(case, session_id, rollout_info, started)
        finally:
            finished = self.gateway.sessions.finish(session_id)
        outcome = attribute_failure(outcome, finished.metadata)
        return Episode(
            case=case,
            session_id=session_id,
            outcome=outcome,
            traces=tuple(finished.traces),
            turns=finished.turns,
            usage=finished.usage,
            session_metadata=dict(finished.metadata),
        )

    async def _invoke(
        self, case: Case, session_id: str, rollout_info: dict[str, Any], started: float
    ) -> SessionOutcome:
        """Build the payload (task code: its errors fail the task) and run the agent session."""
        try:
            payload = build_payload(case.spec, case.row, rollout_info)
            add_oracle_result(case.spec, case.row, payload, self.config.agent)
        except Exception as exc:  # the task's payload callable or its row: the task's fault
            return SessionOutcome(
                status=Status.TASK_FAILED,
                result=None,
                error="building the invoke payload failed: " + failure_text(exc),
                elapsed_s=time.monotonic() - started,
            )
        try:
            return await self.runtime.run_session(
                agent=AgentRef(
                    task=case.spec.name, agent=agent_for(case.spec, self.config.agent),
                    input_id=case.row_id,
                ),
                session_id=session_id,
                payload=payload,
                timeout_s=self.config.eval.timeout_s,
            )
        except HarnessError as exc:
            return SessionOutcome(
                status=Status.INFRA_ERROR,
                result=None,
                error=f"{type(exc).__name__}: {exc}",
                elapsed_s=time.monotonic() - started,
            )

    def live_sessions(self) -> int:
        return int(getattr(self.runtime, "live_sessions", 0) or 0)

    def versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        found = {}
        for package in ("agentcore-rl-harness", "torch", "transformers", "bedrock-agentcore"):
            try:
                found[package] = version(package)
            except PackageNotFoundError:
                continue
        return found

    def close(self) -> None:
        try:
            if self.runtime is not None:
                self.loop.run(self.runtime.aclose(), timeout=60)
        finally:
            self.loop.close()
            if self.gateway is not None:
                self.gateway.stop()
            if self._sampler is not None and self._external is None:
                self._sampler.close()
            # Service trainers hold billed remote sessions: release them on every exit path.
            close_trainer = getattr(self._trainer, "close", None)
            if close_trainer is not None:
                close_trainer()
