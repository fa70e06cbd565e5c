"""The one composition root: sampler, gateway, runtime and trainer of a run, from the typed config.

`Harness` builds each part from `HarnessConfig` unless it is given one: a `sampler` (with the
`tokenizer` or `renderer` of its chat template; an external engine's, or `ScriptedSampler`), a
`runtime` (`runtimes.fake.FakeRuntime` in tests), a `trainer`. Parts passed in stay their
owner's: the harness never closes them. It starts lazily (the first case, fixture or trainer),
owns the event loop thread everything async runs on, and closes once. Nothing else in the run
core builds a part; the `build_*` functions below are each one part's recipe.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import HarnessConfig
from ..errors import ConfigError
from ..judges.groups import GroupBoard
from ..records import Status
from ..runtimes.base import AgentRef, AgentRuntime
from .backend import Backend
from .cases import Case, Episode
from .episodes import EpisodeRunner, CaseSettings
from .loop import LoopThread
from .training import TrainPlan

if TYPE_CHECKING:
    from .judging import Judging
    from ..tasks import TaskSpec
    from ..gateway.rendering import Renderer
    from ..gateway.sampling import SamplingBackend
    from ..gateway.server import GatewayServer
    from ..trainers.base import Trainer
    from ..trainers.registry import TrainerSpec


def check_public_gateway_url(url: str, *, serves_plain_http: bool = False, bound_to: str = "127.0.0.1",
                             tls_terminated_upstream: bool = False) -> str:
    """ACR sessions run in AWS: a loopback gateway URL can never be reached from there, and their
    session keys are bearer credentials that must not cross a network in clear text: a plain
    HTTP URL, or a gateway serving plain HTTP on a non-loopback address, is refused unless the
    user states that TLS is terminated in front of it (`gateway.tls_terminated_upstream`)."""
    import ipaddress
    from urllib.parse import urlsplit

    from ..gateway.server import is_loopback

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
            "gateway.public_url=https://<reachable host>/v1 (docs/runtimes.md: Reaching the gateway from "
            "AgentCore)"
        )
    plain = urlsplit(url).scheme == "http" or (serves_plain_http and not is_loopback(bound_to))
    if plain and not tls_terminated_upstream:
        raise ConfigError(
            f"runtime=agentcore: session keys would travel in clear text (advertised URL {url}, "
            f"gateway serving plain HTTP on {bound_to}); serve TLS with gateway.tls.certfile and "
            "gateway.tls.keyfile, or terminate TLS in front (load balancer, tunnel) and set "
            "gateway.tls_terminated_upstream=true (docs/runtimes.md: Reaching the gateway from AgentCore)"
        )
    return url


@dataclass
class Policy:
    """What serves the policy: the sampler the gateway uses and the tokenizer of its template."""

    sampler: SamplingBackend
    tokenizer: Any
    where: str  # for the "model loaded" line
    model: Any = None  # the in-process torch model (in-process trainers update it)
    context_window: int | None = None  # from the model folder, when there is one
    trainer: Trainer | None = None  # a service trainer: it owns the weights and the sampler
    chat: Any = None  # sampler=hosted: the hosted model every turn passes through (gateway/passthrough.py)


def trainer_spec(config: HarnessConfig) -> TrainerSpec | None:
    if config.trainer is None:
        return None
    from ..trainers.registry import spec_for

    return spec_for(config.trainer.trainer.kind)


def load_policy(config: HarnessConfig, *, run_dir: Path | None = None) -> Policy:
    """A service trainer (Tinker, SageMaker) holds the weights elsewhere: only the tokenizer is
    loaded and the trainer's sampler serves. `sampler=vllm`: a vLLM server samples (started here,
    its log in `run_dir`), the in-process model only when a trainer updates it. Otherwise the
    in-process model and `HFLocalSampler`."""
    from ..models import context_window, load_model, load_tokenizer, resolve_model

    model_dir = resolve_model(config.model.name)
    window = context_window(model_dir)
    tokenizer = load_tokenizer(model_dir)
    spec = trainer_spec(config)
    if spec is not None and spec.kind == "service":
        trainer = spec.load_factory()(section=config.trainer, model_dir=model_dir, tokenizer=tokenizer,
                                      config=config)
        return Policy(sampler=trainer.sampler, tokenizer=tokenizer, context_window=window, trainer=trainer,
                      where=f"trainer={config.trainer.trainer.kind} service; tokenizer {model_dir}")
    if config.sampler.kind == "hosted":  # evaluation only: the model's window is the host's business
        from ..samplers.hosted_factory import build_hosted

        chat, no_tokens = build_hosted(config.sampler.hosted)
        return Policy(sampler=no_tokens, tokenizer=tokenizer, chat=chat, where=f"hosted {chat.describe()}, "
                      f"pass-through, no token capture; tokenizer {model_dir} renders plans only")
    if config.sampler.kind == "vllm":
        from ..samplers.vllm_policy import start_policy_sampler

        model = load_model(model_dir, dtype=config.model.dtype) if spec is not None else None
        remote = start_policy_sampler(config.sampler.vllm, model_dir=model_dir, tokenizer=tokenizer, run_dir=run_dir)
        window = min(window or config.sampler.vllm.max_model_len, config.sampler.vllm.max_model_len)
        return Policy(sampler=remote, tokenizer=tokenizer, model=model, context_window=window,
                      where=f"vLLM at {remote.engine.base_url} serving {model_dir}")
    model = load_model(model_dir, dtype=config.model.dtype)
    sampler = config.sampler.local_sampler(model)
    window = getattr(getattr(model, "config", None), "max_position_embeddings", None) or window
    return Policy(sampler=sampler, tokenizer=tokenizer, model=model, context_window=window,
                  where=str(model_dir))


def advertised_url(config: HarnessConfig, gateway_url: str) -> str:
    """The gateway URL agents are given: `gateway.public_url`, else the gateway's own; for
    runtime=agentcore one AWS can reach, over TLS (`check_public_gateway_url`)."""
    url = config.gateway.public_url or gateway_url
    if config.runtime.kind != "agentcore":
        return url
    return check_public_gateway_url(
        url, serves_plain_http=gateway_url.startswith("http:"), bound_to=config.gateway.host,
        tls_terminated_upstream=config.gateway.tls_terminated_upstream,
    )


def build_runtime(config: HarnessConfig, *, private_dirs: tuple[Path, ...] = ()) -> AgentRuntime:
    """The `runtime` node's kind, built from its node (`runtimes/registry.py`); `private_dirs`,
    the run directory, are hidden from local sessions; an invoke outlasts `eval.timeout_s`."""
    from ..runtimes.registry import runtime_spec

    return runtime_spec(config.runtime.kind).build(config.runtime, private_dirs=private_dirs,
                                                   session_timeout_s=config.eval.timeout_s)


def build_trainer(config: HarnessConfig, *, model: Any, sampler: SamplingBackend) -> Trainer:
    """An in-process trainer over the sampler's own model (service trainers come with the policy)."""
    spec = trainer_spec(config)
    if spec is None:
        raise ConfigError("no trainer is configured (the `trainer` config group is missing)")
    if spec.kind == "external":
        raise ConfigError(spec.load_factory())
    return spec.load_factory()(model, sampler=sampler, section=config.trainer)


class Harness:
    """Sampler + gateway + runtime (+ trainer) of one run. Start lazily, close once (again: no-op)."""

    def __init__(
        self,
        config: HarnessConfig,
        *,
        progress: Callable[[str], None] | None = None,
        sampler: SamplingBackend | None = None,
        tokenizer: Any = None,
        renderer: Renderer | None = None,
        model_id: str | None = None,
        runtime: AgentRuntime | None = None,
        trainer: Trainer | None = None,
        private_dirs: tuple[Path, ...] = (),
    ) -> None:
        """`sampler` plugs in an engine's `SamplingBackend` (verl, slime, a test's scripted one)
        with the `tokenizer` (or `renderer`) of its chat template: no weights are loaded here.
        `private_dirs` (the run directory) are hidden from isolated agent sessions."""
        if sampler is not None and tokenizer is None and renderer is None:
            raise ConfigError("an external sampler needs the tokenizer that renders its prompts")
        self.config = config
        self.private_dirs = tuple(Path(p).resolve() for p in private_dirs)
        self.loop = LoopThread()
        self._progress = progress or (lambda message: None)
        self._given_sampler, self._given_runtime, self._given_trainer = sampler, runtime, trainer
        self._tokenizer, self.renderer = tokenizer, renderer
        self.model_id = model_id or config.model.name
        self._sampler: SamplingBackend | None = sampler
        self._model: Any = None
        self._trainer: Trainer | None = trainer
        self._chat: Any = None  # sampler=hosted's pass-through model
        self.gateway: GatewayServer | None = None
        self.runtime: AgentRuntime | None = None
        self.episodes: EpisodeRunner | None = None
        self.advertised_url = ""
        self._start_lock = threading.Lock()
        self.groups = GroupBoard()  # each GRPO group's episodes, for group-relative judges
        self._judging: Judging | None = None

    @property
    def sampler(self) -> SamplingBackend | None:
        return self._sampler

    def start(self) -> None:
        with self._start_lock:
            if self.gateway is not None:
                return
            from ..gateway.rendering import ChatTemplateRenderer
            from ..gateway.server import GatewayServer

            started = time.monotonic()
            context_window, where, self._chat = None, "external sampler", None
            if self._sampler is None:
                policy = load_policy(self.config, run_dir=self.private_dirs[0] if self.private_dirs else None)
                self._sampler, self._tokenizer, self._model = policy.sampler, policy.tokenizer, policy.model
                context_window, where = policy.context_window, policy.where
                self._trainer = self._trainer or policy.trainer
                self._chat = policy.chat
            if self.renderer is None:
                self.renderer = ChatTemplateRenderer(self._tokenizer)
            gateway = GatewayServer(sampler=self._sampler, renderer=self.renderer, model_id=self.model_id,
                                    config=self.config.gateway, sampling=self.config.sampling.to_params(),
                                    context_window_tokens=context_window, chat=self._chat)
            gateway.start()
            self.gateway = gateway
            self.advertised_url = advertised_url(self.config, gateway.base_url)
            self.runtime = self._given_runtime or build_runtime(self.config, private_dirs=self.private_dirs)
            self.episodes = EpisodeRunner(sessions=gateway.sessions, runtime=self.runtime, loop=self.loop,
                                          settings=CaseSettings.of(self.config, model_id=self.model_id,
                                                                   base_url=self.advertised_url))
            self._progress(
                f"agentcore-rl: model {self.config.model.name} ({where}) loaded, gateway at "
                f"{gateway.base_url} in {time.monotonic() - started:.1f}s"
            )

    def started(self, specs: Sequence[TaskSpec] = (), *, write: Callable[[str], None] | None = None) -> Harness:
        """This harness, started (model, sampler, gateway, runtime). With `specs`, `write` gets the
        runtime's notes on those tasks' settings it cannot apply (`AgentRuntime.notes`, e.g.
        environments on ACR)."""
        if specs and write is None:
            raise TypeError("Harness.started(specs) needs write= for the runtime's notes on those tasks")
        self.start()
        if specs:
            for note in self.runtime.notes(agents=[AgentRef(task=spec.name, agent=spec.agent_path(),
                                                            environment=spec.environment_path()) for spec in specs]):
                write(f"agentcore-rl: {note}")
        return self

    def trainer(self) -> Trainer:
        """The configured trainer: in-process ones share the policy model with the sampler."""
        self.start()
        if self._trainer is None:
            self._trainer = build_trainer(self.config, model=self._model, sampler=self._sampler)
        return self._trainer

    def backend(self) -> Backend:
        """The run's sampling backend for task code: the gateway's sampler and renderer."""
        self.start()
        return Backend(sampler=self._sampler, renderer=self.renderer, loop=self.loop,
                       model_name=self.model_id, sampling=self.config.sampling.to_params())

    def offline_fixtures(self) -> dict[str, Any]:
        """The fixtures a task body gets when the harness scores a rollout itself."""
        self.start()
        return {"agentcore_rl_config": self.config, "gateway": self.gateway, "backend": self.backend()}

    def train_plan(self) -> TrainPlan:
        return TrainPlan.from_config(self.config)

    def submit(self, case: Case) -> concurrent.futures.Future[Episode]:
        self.start()
        self.groups.expect(case.group_id)
        return self.loop.submit(self._run_member(case))

    async def _run_member(self, case: Case) -> Episode:
        """A submitted case: its group's judge waits for it, however it ends."""
        episode = None
        try:
            episode = await self.run_case(case)
            return episode
        finally:
            self.groups.done(case.group_id, case.sample_index, episode)

    def judging(self, run_dir: Path | None = None) -> Judging:
        """The judge of judged rewards (`roles.judge`), its cache and usage in `run_dir`/judge/."""
        from ..judges.clients import build_client, identity
        from ..judges.service import JudgeService
        from ..judges.usage import JUDGE_DIR
        from .judging import Judging

        self.start()
        if self._judging is None:
            config = self.config.roles.judge
            where = run_dir / JUDGE_DIR if run_dir is not None else None
            policy = (self._sampler, self.renderer, self.model_id)
            service = JudgeService(config, identity=identity(config, policy_model=self.model_id),
                                   client=lambda: build_client(config, policy=policy), cache_dir=where, usage_dir=where)
            self._judging = Judging(service, members=self._group_members)
        return self._judging

    async def _group_members(self, case: Case) -> dict[int, Any]:
        from .scoring import RolloutHandle

        episodes = await self.groups.members(case.group_id)
        return {index: RolloutHandle(episode) for index, episode in episodes.items()
                if episode is not None and episode.outcome.status is Status.COMPLETED}

    async def run_case(self, case: Case) -> Episode:
        """Run one case on the loop (at most `runtime.concurrency` at once)."""
        assert self.episodes is not None, "Harness.start() first"
        return await self.episodes.run(case)

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run task code (sync or async) to completion; coroutines run on the harness's loop."""
        return self.loop.call(function, *args, **kwargs)

    def live_sessions(self) -> int:
        return self.episodes.live_sessions() if self.episodes is not None else 0

    def session_of(self, case: Case) -> tuple[str, float] | None:
        """The session id and start time of a case whose agent session runs now; else None."""
        return self.episodes.session_of(case) if self.episodes is not None else None

    def versions(self) -> dict[str, str]:
        from .finish import versions

        return versions()

    def close(self) -> None:
        """Release held resources, the runtime, the loop, the gateway and what the harness built
        (a second call does nothing)."""
        if self.loop.loop.is_closed():
            return
        try:
            if self.episodes is not None:
                self.loop.run(self.episodes.release_all(), timeout=60)
            if self._judging is not None:
                self.loop.run(self._judging.aclose(), timeout=60)
            if self.runtime is not None and self._given_runtime is None:
                self.loop.run(self.runtime.aclose(), timeout=60)
        finally:
            self.loop.close()
            if self.gateway is not None:
                self.gateway.stop()
            if self._sampler is not None and self._given_sampler is None:
                self._sampler.close()
            if self._chat is not None:
                self._chat.close()
            # Service trainers hold billed remote sessions: release them on every exit path.
            if self._trainer is not None and self._given_trainer is None:
                self._trainer.close()
