"""Typed configuration, and the one place that reads Hydra's DictConfig.

`compose_config` composes the packaged defaults (plus a project's `configs/`) with Hydra and
turns the result into frozen dataclasses; every other module receives its own typed node.

Long because it is the one module that reads Hydra's DictConfig (Hydra at the edge only): the
typed nodes of the harness-wide groups, the composition with its error hints, the builder that
checks every key and type, and the sweep job's reading all sit at that one edge. Nodes of one
implementation live beside it (`trainers/*`, `runtimes/isolation.SandboxLimits`).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, ConfigWarning
from .records import HISTORY_MODES, SamplingParams, SessionLimits
from .runtimes.isolation import ISOLATION_KINDS, START_METHODS, SandboxLimits
from .runtimes.network import NetworkPolicy
from .sanity_agents import AGENTS as SANITY_AGENTS
from .samplers.vllm_engine import VLLMSettings

PACKAGED_CONFIG_MODULE = "agentcore_rl_harness.conf"
TASK_AGENT = "task"
AGENT_CHOICES = (TASK_AGENT, *SANITY_AGENTS)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    dtype: str = "float32"


@dataclass(frozen=True)
class SamplerConfig:
    kind: str = "hf"
    max_batch_size: int = 16
    batch_wait_s: float = 0.005
    prefix_cache_tokens: int = 32768  # KV prefix cache size in tokens (0 = off); ~45 KiB/token for SmolLM2
    vllm: VLLMSettings = field(default_factory=VLLMSettings)  # sampler=vllm (samplers/vllm_engine.py)


@dataclass(frozen=True)
class RuntimeConfig:
    kind: str = "local"
    start_method: str = "auto"  # spawn: fresh python; fork: from a pre-imported zygote (isolation=none)
    isolation: str = "auto"  # bwrap (namespaces), uid (a uid per session), none; auto: the strongest here
    limits: SandboxLimits = field(default_factory=SandboxLimits)  # rlimits of session processes
    network: NetworkPolicy = field(default_factory=NetworkPolicy)  # bwrap: the gateway + allow, or host
    hidden_paths: tuple[str, ...] = ()  # bwrap: also hidden from sessions (the run dir always is)
    readable_paths: tuple[str, ...] = ()  # bwrap: bound back read-only into every session
    final_state_mb: int = 16  # the most of a session's final files kept for the sandbox fixture
    keep_final_state: bool = True  # also save them in the run dir (states/) for `agentcore-rl rescore`
    concurrency: int = 8
    startup_timeout_s: float = 60.0
    env_passthrough: tuple[str, ...] = ()
    # runtime=agentcore (Bedrock AgentCore Runtime through boto3)
    arns: dict[str, str] = field(default_factory=dict)  # task name (or "*") -> runtime ARN
    region: str | None = None
    qualifier: str = "DEFAULT"
    tps_per_arn: float = 25.0
    result_mode: str = "inline"
    s3_bucket: str | None = None
    exp_id: str | None = None
    endpoint_url: str | None = None
    s3_endpoint_url: str | None = None
    max_invoke_attempts: int = 5
    read_timeout_s: float = 3600.0
    poll_initial_s: float = 0.5
    poll_max_s: float = 10.0
    # the quotas' holder (runtimes/limits.py): this process (local) or a Ray actor the job shares (ray)
    limiter: str = "local"
    max_live_sessions: int | None = None  # the limiter's live-session cap; None = concurrency
    priorities: dict[str, int] = field(default_factory=dict)  # task -> priority (eval 1, train 0)
    ray_address: str | None = None
    limiter_name: str = "agentcore-rl-limiter"
    lease_ttl_s: float = 30.0


@dataclass(frozen=True)
class SamplingConfig:
    """The `sampling` node; its defaults are `SamplingParams`' (records.py), not a copy."""

    temperature: float = SamplingParams.temperature
    top_p: float = SamplingParams.top_p
    top_k: int = SamplingParams.top_k
    max_tokens: int = SamplingParams.max_tokens

    def to_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_tokens,
        )


_LIMITS = SessionLimits()


@dataclass(frozen=True)
class GatewayTLS:
    certfile: str | None = None  # PEM certificate (chain) the gateway serves HTTPS with
    keyfile: str | None = None  # its PEM private key


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 0
    max_body_bytes: int = 8 * 1024 * 1024
    public_url: str | None = None  # the URL remote agents use (ending in /v1); null = base_url
    history: str = "exact"  # a turn's prompt from the sampled ids (exact) or the template (template)
    gc_freeze: bool = False  # gc.freeze() after start: fewer full-collection pauses under load
    lenient_history: bool = False  # accept tool results that answer no call (real APIs: 400)
    # Session limits (None = unlimited); defaults from records.SessionLimits, see its docstring.
    max_turns: int | None = _LIMITS.max_turns
    idle_ttl_s: float | None = _LIMITS.idle_ttl_s
    max_lifetime_s: float | None = _LIMITS.max_lifetime_s
    context_budget_tokens: int | None = _LIMITS.context_budget_tokens
    tls: GatewayTLS = field(default_factory=GatewayTLS)  # serve HTTPS directly
    tls_terminated_upstream: bool = False  # runtime=agentcore: plain HTTP is OK, TLS is in front
    admin_port: int = 0  # the loopback admin listener when host is not loopback (0: a free port)
    failed_key_limit: int | None = 30  # unknown keys per peer per minute before 429s (null: off)
    keep_alive_s: int = 75  # idle keep-alive; must outlive clients' and load balancers' idle timeouts

    def limits(self) -> SessionLimits:
        return SessionLimits(max_turns=self.max_turns, context_budget_tokens=self.context_budget_tokens,
                             idle_ttl_s=self.idle_ttl_s, max_lifetime_s=self.max_lifetime_s)

    def validate(self) -> None:
        try:
            self.limits().check()
        except ValueError as exc:
            raise ConfigError(f"{exc} (set it with --agentcore-rl-set gateway.<key>=<value>)") from exc


@dataclass(frozen=True)
class EvalConfig:
    """The `eval` group (conf/eval/<name>.yaml): which rows an evaluation rolls out, and how."""

    split: str = "test"
    samples: int | None = None  # samples per row; None = the task's own `samples`
    max_rows: int | None = None  # cap on rows per task; None = all
    timeout_s: float = 300.0  # per rollout, counted from submission
    temperature: float | None = None  # evaluation rollouts' temperature (0: greedy); None = sampling's

    def validate(self) -> None:
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"eval.temperature={self.temperature} must be >= 0 (0: greedy decoding; "
                              "null: the training temperature, sampling.temperature)")
        for name in ("samples", "max_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"eval.{name}={value} must be >= 1 (or null for the default)")
        if self.timeout_s <= 0:
            raise ConfigError(f"eval.timeout_s={self.timeout_s} must be > 0 seconds")
        if not self.split:
            raise ConfigError("eval.split must name a dataset split (e.g. test)")


WARMUP_SOURCES = ("oracle", "run:DIR", "dataset:PATH")


@dataclass(frozen=True)
class WarmupConfig:
    """The `warmup` node: supervised steps on demonstrations before RL (`run` / `train` modes)."""

    enabled: bool = False
    source: str = "oracle"  # oracle | run:DIR (its successful train-row rollouts) | dataset:PATH
    steps: int = 20  # supervised steps
    batch_size: int = 8  # demonstrations per step (a seeded, epoch-cycling order)
    lr: float | None = None  # null = trainer.lr
    max_demonstrations: int | None = None  # cap on demonstrations; null = every train row's
    eval: bool = True  # run mode: evaluate the test rows after the warm-up (phase "warmup")

    def validate(self) -> None:
        kind, _, where = self.source.partition(":")
        if not (self.source == "oracle" or (kind in ("run", "dataset") and where)):
            raise ConfigError(f"warmup.source={self.source!r}; valid choices: {list(WARMUP_SOURCES)}")
        for name in ("steps", "batch_size", "max_demonstrations"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"warmup.{name}={value} must be >= 1")
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"warmup.lr={self.lr} must be > 0 (or null for trainer.lr)")


@dataclass(frozen=True)
class GatesConfig:
    """The `gates` group: CI gates that turn the exit status non-zero (DESIGN.md, Exit status)."""

    min_success_rate: float | dict[str, float] | None = None  # overall, or {task|overall: rate}
    # {success_rate: -2pp, mean_reward: -0.05}, judged on the paired test vs --agentcore-rl-compare
    max_regression: dict[str, str | float] | None = None

    def validate(self) -> None:
        rates = self.min_success_rate
        named = {"overall": rates} if isinstance(rates, float) else dict(rates or {})
        for subject, rate in named.items():
            if not 0.0 <= rate <= 1.0:
                key = "gates.min_success_rate" + ("" if isinstance(rates, float) else f".{subject}")
                raise ConfigError(f"{key}={rate} must be a rate between 0 and 1 (0.8 = 80%)")
        if self.max_regression:
            from .errors import HarnessError
            from .reports.compare import REGRESSION_METRICS, parse_amount

            unknown = sorted(set(self.max_regression) - set(REGRESSION_METRICS))
            if unknown:
                raise ConfigError(
                    f"gates.max_regression: unknown metric(s) {unknown}; valid choices: "
                    f"{list(REGRESSION_METRICS)}"
                )
            for metric, amount in self.max_regression.items():
                try:
                    parse_amount(amount, metric=metric)
                except HarnessError as exc:
                    raise ConfigError(str(exc)) from exc


from .reports.model import REPORT_FORMATS  # noqa: E402 (re-exported: config.REPORT_FORMATS)
PROGRESS_STYLES = ("auto", "lines", "off")


@dataclass(frozen=True)
class ReportConfig:
    """The `report` group: which report files a run writes, and the live progress display."""

    formats: tuple[str, ...] = REPORT_FORMATS  # report.json is always among them
    step_summary: bool = True  # append report.md to $GITHUB_STEP_SUMMARY when that is set
    progress: str = "auto"  # auto: a redrawn status line on a TTY, else lines; lines; off
    progress_every_pct: float = 10.0  # lines style: a line each time this share more is done
    progress_every_s: float = 30.0  # lines style: and at least one line this often

    def validate(self) -> None:
        unknown = [name for name in self.formats if name not in REPORT_FORMATS]
        if unknown:
            raise ConfigError(
                f"report.formats: unknown format(s) {unknown}; valid choices: {list(REPORT_FORMATS)}"
            )
        if "json" not in self.formats:
            raise ConfigError(
                f"report.formats={list(self.formats)} must include json: report.json is what "
                "gates, --agentcore-rl-compare and baselines read"
            )
        if not 0 < self.progress_every_pct <= 100:
            raise ConfigError(f"report.progress_every_pct={self.progress_every_pct} must be in (0, 100]")
        if self.progress_every_s <= 0:
            raise ConfigError(f"report.progress_every_s={self.progress_every_s} must be > 0")


# Keys of the `trainer` node that drive the training loop (the rest configure the trainer).
LOOP_KEYS = ("steps", "batch_rows", "checkpoint_every", "overlap_rollouts")
# Keys of the `algo` node that the runner uses (the rest configure the algorithm).
GROUP_KEYS = ("group_size",)


@dataclass(frozen=True)
class TrainLoopConfig:
    steps: int = 20
    batch_rows: int = 4
    checkpoint_every: int = 5
    group_size: int | None = None  # samples per train row; null = the task's `samples`
    overlap_rollouts: bool = False  # the next step's rollouts run during this step's update


@dataclass(frozen=True)
class TrainerSection:
    """The `trainer` and `algo` groups: the loop, plus each implementation's typed config."""

    loop: TrainLoopConfig
    trainer: Any  # e.g. trainers.local.LocalTrainerConfig
    algo: Any  # e.g. trainers.grpo.GRPOConfig
    dropped: tuple[str, ...] = ()  # `trainer` keys of another trainer kind, left out (scoping)


def foreign_trainer_keys(kind: str, keys: typing.Iterable[str]) -> list[str]:
    """Of `keys` the chosen trainer `kind` does not have, those another kind has (`trainer.lr`
    of the in-process trainers under `trainer=verl`): a project config's settings for one kind
    must not stop a switch to another. Keys no kind has stay errors (a typo)."""
    from .trainers.registry import TRAINERS

    own = {f.name for f in dataclasses.fields(TRAINERS[kind].load_config_class())}
    unknown = [key for key in keys if key not in own]
    if not unknown:
        return []
    others: set[str] = set()
    for other, spec in TRAINERS.items():
        if other != kind:
            others.update(f.name for f in dataclasses.fields(spec.load_config_class()))
    return [key for key in unknown if key in others]


def dropped_keys_message(section: TrainerSection | None) -> str | None:
    """What the config left out when it built `section` (None: nothing)."""
    if section is None or not section.dropped:
        return None
    return _dropped_text(section.trainer.kind, section.dropped)


def _dropped_text(kind: str, keys: typing.Sequence[str]) -> str:
    named = ", ".join(f"trainer.{key}" for key in keys)
    return (f"trainer={kind} has no {named}: a setting of another trainer kind, ignored "
            f"(it applies again when that trainer is chosen)")


def _algo_classes() -> dict[str, type]:
    from .trainers.grpo import GRPOConfig

    return {"grpo": GRPOConfig}


def build_trainer_section(trainer: dict[str, Any], algo: dict[str, Any]) -> TrainerSection:
    trainer_kind, algo_kind = trainer.get("kind"), algo.get("kind")
    from .trainers.registry import spec_for

    trainer_spec, algo_classes = spec_for(str(trainer_kind)), _algo_classes()
    if algo_kind not in algo_classes:
        raise ConfigError(f"algo={algo_kind!r} is not available; valid choices: {sorted(algo_classes)}")
    loop_values = {k: trainer[k] for k in LOOP_KEYS if k in trainer}
    loop_values.update({k: algo[k] for k in GROUP_KEYS if k in algo})
    loop = build(TrainLoopConfig, loop_values, "trainer")
    for key in ("steps", "batch_rows", "checkpoint_every"):
        if getattr(loop, key) < 1:
            raise ConfigError(f"trainer.{key}={getattr(loop, key)} must be >= 1")
    if loop.group_size is not None and loop.group_size < 2:
        raise ConfigError(f"algo.group_size={loop.group_size} must be >= 2 (GRPO compares samples)")
    impl_values = {k: v for k, v in trainer.items() if k not in LOOP_KEYS}
    dropped = foreign_trainer_keys(str(trainer_kind), impl_values)
    if dropped:
        warnings.warn(_dropped_text(str(trainer_kind), dropped), ConfigWarning, stacklevel=2)
    impl = build(
        trainer_spec.load_config_class(), {k: v for k, v in impl_values.items() if k not in dropped}, "trainer"
    )
    algo_cfg = build(algo_classes[algo_kind], {k: v for k, v in algo.items() if k not in GROUP_KEYS}, "algo")
    check_algo = getattr(impl, "check_algo", None)  # service trainers reject knobs they cannot honour
    if check_algo is not None:
        check_algo(algo_cfg)
    return TrainerSection(loop=loop, trainer=impl, algo=algo_cfg, dropped=tuple(dropped))


def build_logger_section(node: Any) -> dict[str, Any]:
    """The `logger` group (several options at once: `logger=[tensorboard,wandb]`): each selected
    tracker's typed node; an unknown tracker, a key that would hold a credential, or a tracker
    whose package is missing is an error here, before anything runs."""
    from .trackers import registry

    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError(f"config node logger must be a mapping of tracker name -> settings "
                          f"(select trackers with logger=[tensorboard,wandb]), got {node!r}")
    section = {}
    for name, values in node.items():
        module = registry.tracker_module(str(name))
        values = {} if values is None else values
        if isinstance(values, dict):
            registry.check_no_secrets(str(name), list(values))
        section[name] = build(module.Config, values, f"logger.{name}")
        check = getattr(section[name], "validate", None)
        if check is not None:
            check()
        registry.require_package(str(name), module)
    return section


@dataclass(frozen=True)
class HarnessConfig:
    model: ModelConfig
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    gates: GatesConfig = field(default_factory=GatesConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    seed: int = 0
    trainer: Any = None  # a TrainerSection, built from the `trainer` and `algo` nodes
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    agent: str = TASK_AGENT  # task: each task's own agent; oracle / null: a sanity agent; or a file / module:app
    logger: dict[str, Any] = field(default_factory=dict)  # tracker name -> its typed node (trackers/)

    def eval_sampling(self) -> SamplingParams | None:
        """Evaluation rollouts' sampling: `sampling` at `eval.temperature`; None when that is unset."""
        if self.eval.temperature is None:
            return None
        return dataclasses.replace(self.sampling.to_params(), temperature=self.eval.temperature)


def check_agent(agent: str, runtime_kind: str) -> None:
    """`agent` names a choice of AGENT_CHOICES, an agent file (*.py) or a module:app."""
    module, sep, attr = agent.rpartition(":")
    is_app = agent.endswith(".py") or bool(sep and module and attr.isidentifier())
    if agent not in AGENT_CHOICES and not is_app:
        raise ConfigError(
            f"agent={agent!r} is not supported; valid choices: {list(AGENT_CHOICES)} (task: each "
            "task's own agent), or an agent file (path/agent.py) or module:app to run instead"
        )
    if agent != TASK_AGENT and runtime_kind != "local":
        raise ConfigError(
            f"agent={agent} runs a local app in place of the task's agent, which "
            f"runtime={runtime_kind} cannot do (it maps tasks to deployed runtimes); use runtime=local"
        )


def check_warmup(typed: HarnessConfig) -> None:
    """A warm-up needs a trainer with a supervised step (`trainers/registry.py`, `sft`)."""
    from .trainers.registry import sft_trainers, spec_for

    kind = typed.trainer.trainer.kind
    if typed.warmup.enabled and not spec_for(kind).sft:
        raise ConfigError(
            f"warmup.enabled=true: trainer={kind} has no supervised warm-up step yet (trainers with "
            f"one: {list(sft_trainers())}); use one of those or set warmup.enabled=false")


VALID_CHOICES = {
    "sampler.kind": ("hf", "vllm"),
    "runtime.kind": ("local", "agentcore"),
    "gateway.history": HISTORY_MODES,
    "runtime.result_mode": ("inline", "s3", "start_get"),
    "runtime.start_method": START_METHODS,
    "runtime.isolation": ISOLATION_KINDS,
    "model.dtype": ("float32", "bfloat16", "float16"),
    "report.progress": PROGRESS_STYLES,
}


@dataclass(frozen=True)
class ComposedConfig:
    """The typed config plus the resolved plain mapping written to the run's config.yaml."""

    typed: HarnessConfig
    resolved: dict[str, Any]
    overrides: tuple[str, ...]
    source: str


def default_config_source(rootdir: Path) -> Path | None:
    """The project's `configs/` if it holds a config.yaml, else None (packaged defaults)."""
    candidate = rootdir / "configs"
    return candidate if (candidate / "config.yaml").is_file() else None


def compose_config(
    overrides: typing.Sequence[str] = (), *, source: Path | None = None
) -> ComposedConfig:
    """Compose with Hydra: `source` is a config dir (with config.yaml), a YAML file, or None."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides = tuple(overrides)
    saved = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        search = [f"hydra.searchpath=[pkg://{PACKAGED_CONFIG_MODULE}]"]
        if source is None:
            context = initialize_config_module(PACKAGED_CONFIG_MODULE, version_base=None)
            config_name, label = "config", f"pkg://{PACKAGED_CONFIG_MODULE}"
            search = []
        else:
            source = Path(source).resolve()
            if source.is_dir():
                if not (source / "config.yaml").is_file():
                    raise ConfigError(
                        f"config directory {source} has no config.yaml; add one starting with "
                        "`defaults: [agentcore_rl_base, _self_]`"
                    )
                config_dir, config_name = source, "config"
            elif source.is_file() and source.suffix in (".yaml", ".yml"):
                config_dir, config_name = source.parent, source.stem
            else:
                raise ConfigError(
                    f"--agentcore-rl-config {source}: not a directory with config.yaml nor a "
                    ".yaml file"
                )
            context = initialize_config_dir(str(config_dir), version_base=None)
            label = str(source)
        with context:
            cfg = compose(config_name=config_name, overrides=[*search, *map(settable_override, overrides)])
            resolved = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as exc:
        project = source if source is not None and source.is_dir() else None
        raise ConfigError(_explain_hydra_error(exc, overrides, project)) from exc
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)
    assert isinstance(resolved, dict)
    return composed_from(resolved, overrides=overrides, source=label)


def composed_from(resolved: dict[str, Any], *, overrides: typing.Sequence[str], source: str) -> ComposedConfig:
    """The typed config of a resolved mapping (composed here, or by another process of the run)."""
    overrides = tuple(overrides)
    resolved.pop("hydra", None)
    plain = {k: v for k, v in resolved.items() if k not in ("trainer", "algo", "logger")}
    if "agent" in plain and plain["agent"] is None:  # Hydra reads `agent=null` as None
        plain["agent"] = "null"
    typed = build(HarnessConfig, plain, "")
    typed = dataclasses.replace(
        typed,
        trainer=build_trainer_section(resolved.get("trainer") or {}, resolved.get("algo") or {}),
        logger=build_logger_section(resolved.get("logger")),
    )
    for key, choices in VALID_CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(typed, section), name)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is not supported; valid choices: {list(choices)}")
    for section in (typed.gateway, typed.eval, typed.gates, typed.report, typed.warmup):
        section.validate()
    typed.runtime.network.check()
    check_agent(typed.agent, typed.runtime.kind)
    check_warmup(typed)
    return ComposedConfig(typed=typed, resolved=resolved, overrides=overrides, source=source)


def settable_override(override: str) -> str:
    """`section.key=value` as `++section.key=value` (add or set) when the key is in the schema.

    A group option a project supplies (`configs/eval/mine.yaml`) replaces the packaged one, so a
    key it leaves out is missing from the composed node, and Hydra's struct mode refuses to set it
    ("Could not override 'eval.temperature'"). Every key of the typed schema has a default, so
    such a key may be added; a key the schema does not know stays a plain override (Hydra's error).
    """
    key, sep, _ = override.partition("=")
    if not sep or key[:1] in "+~" or "@" in key or "." not in key:
        return override
    node: Any = HarnessConfig
    for name in key.split("."):
        if not (dataclasses.is_dataclass(node) and name in {f.name for f in dataclasses.fields(node)}):
            return override
        node = typing.get_type_hints(node)[name]
    return "++" + override


def _as_typed(override: str) -> str:
    """An override as the user wrote it: without the `++` that `settable_override` added."""
    return override[2:] if override.startswith("++") and settable_override(override[2:]) == override else override


def _explain_hydra_error(exc: Exception, overrides: tuple[str, ...], project: Path | None) -> str:
    text = str(exc).strip()
    groups = _available_groups(project)
    hint = "; ".join(f"{group}: {', '.join(opts)}" for group, opts in groups.items())
    return f"bad config override in {list(overrides)}: {text}\navailable config groups: {hint}"


def _available_groups(project: Path | None = None) -> dict[str, list[str]]:
    """Config groups and their options: the packaged ones plus a project config dir's own."""
    from importlib.resources import files

    groups: dict[str, set[str]] = {}
    for root in (files(PACKAGED_CONFIG_MODULE), project):
        if root is None:
            continue
        for entry in root.iterdir():
            if entry.is_dir() and not entry.name.startswith(("_", ".")):
                options = {p.name.rsplit(".", 1)[0] for p in entry.iterdir() if p.name.endswith(".yaml")}
                if options:
                    groups.setdefault(entry.name, set()).update(options)
    return {group: sorted(options) for group, options in sorted(groups.items())}


def build(cls: type, data: Any, path: str) -> Any:
    """Build frozen dataclass `cls` from a plain mapping, rejecting unknown keys and bad types."""
    if not isinstance(data, dict):
        raise ConfigError(f"config node {path or '<root>'} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        where = path or "<root>"
        raise ConfigError(
            f"unknown config key(s) {unknown} under {where}; valid keys: {sorted(known)}"
        )
    values = {}
    for name, f in known.items():
        key = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config key {key} is required")
            continue
        values[name] = _coerce(hints[name], data[name], key)
    return cls(**values)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for option in inner:
            try:
                return _coerce(option, value, key)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key {key} must be a mapping, got {value!r}")
        key_type, value_type = typing.get_args(hint) or (Any, Any)
        return {k: _coerce(value_type, v, f"{key}.{k}") if value_type is not Any else v
                for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key {key} must be a list, got {value!r}")
        return tuple(value)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not isinstance(value, hint) or (
        hint in (int, float) and isinstance(value, bool)
    ):
        raise ConfigError(
            f"config key {key} must be {hint.__name__}, got {value!r}; fix it with "
            f"--agentcore-rl-set {key}=<{hint.__name__}>"
        )
    return value


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class HydraJob:
    """What one `agentcore-rl sweep` job needs from Hydra's DictConfig (read only here)."""

    output_dir: Path
    number: int
    settings: Any  # the job's `sweep` node as its dataclass (sweep.SweepSettings)
    resolved: dict[str, Any]  # the job's config without the `sweep` and `hydra` nodes
    overrides: tuple[str, ...]  # the job's overrides, without `sweep.*` ones
    sweep_dir: Path | None = None  # a multirun's sweep directory (None: a single run)


def hydra_job(cfg: Any) -> HydraJob:
    """Read the running Hydra job (`cfg` is the DictConfig `@hydra.main` passed in)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    hydra_cfg = HydraConfig.get()
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.pop("sweep", None)
    resolved.pop("hydra", None)
    number = OmegaConf.select(hydra_cfg, "job.num", default=None, throw_on_missing=False)
    return HydraJob(
        output_dir=Path(hydra_cfg.runtime.output_dir).resolve(),
        number=0 if number is None else int(number),
        settings=OmegaConf.to_object(cfg.sweep),
        resolved=resolved,
        overrides=tuple(
            _as_typed(o) for o in hydra_cfg.overrides.task if not o.lstrip("+~").startswith("sweep.")
        ),
        sweep_dir=Path(hydra_cfg.sweep.dir).resolve() if hydra_cfg.mode == RunMode.MULTIRUN else None,
    )
