"""Typed configuration, and the one place that reads Hydra's DictConfig.

`compose_config` composes the packaged defaults (plus a project's `configs/`) with Hydra and
turns the result into frozen dataclasses; every other module receives its own typed node.

Each part owns its node, beside its code, with the only copy of its defaults: `runtime` and
`trainer` are picked by kind (`runtimes/registry.py`, `trainers/registry.py`); `gateway` is
`gateway.config.GatewayConfig`; `sampler` is `samplers/config.py`'s; `report` and `gates` live in
`reports/config.py`. The packaged YAML files hold only what differs from those defaults;
`config_schema.py` builds the nodes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_schema import build, plain, unknown_key_message
from .errors import ConfigError
from .gateway.config import GatewayConfig
from .judges.config import RolesConfig
from .recipe.config import RecipeConfig
from .records import SamplingParams
from .reports.config import GatesConfig, ReportConfig
from .runtimes.local_config import LocalRuntimeConfig
from .runtimes.registry import RUNTIMES, runtime_spec
from .sanity_agents import AGENTS as SANITY_AGENTS
from .samplers.config import SamplerConfig
from .trackers.registry import build_logger_section
from .trainers.section import GROUP_KEYS, LOOP_KEYS, TrainLoopConfig, algo_classes, build_trainer_section

PACKAGED_CONFIG_MODULE = "agentcore_rl_harness.conf"
TASK_AGENT = "task"
AGENT_CHOICES = (TASK_AGENT, *SANITY_AGENTS)


@dataclass(frozen=True)
class ModelConfig:
    name: str  # a named model (agentcore-rl models list) or a local HF folder path
    dtype: str = "float32"  # float32 | bfloat16 | float16


@dataclass(frozen=True)
class SamplingConfig:
    """The `sampling` node; its defaults are `SamplingParams`' (records.py), not a copy."""

    temperature: float = SamplingParams.temperature  # the trainer owns sampling: wins over what an agent sends
    top_p: float = SamplingParams.top_p  # nucleus sampling (1.0: off)
    top_k: int = SamplingParams.top_k  # top-k sampling (0: off)
    max_tokens: int = SamplingParams.max_tokens  # reply tokens per turn (an agent may only lower it)

    def to_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              max_tokens=self.max_tokens)


@dataclass(frozen=True)
class EvalConfig:
    """The `eval` group (conf/eval/<name>.yaml): which rows an evaluation rolls out, and how."""

    split: str = "test"  # which rows an eval run rolls out
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

    enabled: bool = False  # supervised steps before RL (cross-entropy on train rows' assistant tokens)
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
class HarnessConfig:
    model: ModelConfig
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    # the `runtime` node of its kind (runtimes/registry.py): LocalRuntimeConfig, AgentCoreRuntimeConfig
    runtime: Any = field(default_factory=LocalRuntimeConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    gates: GatesConfig = field(default_factory=GatesConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    seed: int = 0  # seeds sampling, data order and the trainer
    trainer: Any = None  # a TrainerSection, built from the `trainer` and `algo` nodes
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    agent: str = TASK_AGENT  # task: each task's own agent; oracle / null: a sanity agent; or a file / module:app
    logger: dict[str, Any] = field(default_factory=dict)  # tracker name -> its typed node (trackers/)
    roles: RolesConfig = field(default_factory=RolesConfig)  # models by role besides the policy (judges/config.py)
    recipe: RecipeConfig = field(default_factory=RecipeConfig)  # recipe=auto | none (recipe/config.py)

    def eval_sampling(self) -> SamplingParams | None:
        """Evaluation rollouts' sampling: `sampling` at `eval.temperature`; None when that is unset."""
        return None if self.eval.temperature is None else dataclasses.replace(
            self.sampling.to_params(), temperature=self.eval.temperature)


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


VALID_CHOICES = {"sampler.kind": ("hf", "vllm", "hosted"), "model.dtype": ("float32", "bfloat16", "float16")}

# Nodes made of several classes: the keys each takes (the rest of HarnessConfig is typed).
_SPLIT_NODES = ("runtime", "trainer", "algo")


def node_classes(section: str) -> list[type]:
    """The dataclasses whose keys a top-level node may hold (every kind's, for picked nodes)."""
    if section == "runtime":
        return [spec.config_class for spec in RUNTIMES.values()]
    if section in ("trainer", "algo"):
        from .trainers.registry import TRAINERS

        kinds = [spec.load_config_class() for spec in TRAINERS.values()] if section == "trainer" else \
            list(algo_classes().values())
        return [TrainLoopConfig, *kinds]
    hint = typing.get_type_hints(HarnessConfig).get(section)
    return [hint] if dataclasses.is_dataclass(hint) else []


def build_runtime_node(node: Any) -> Any:
    """The `runtime` node as its kind's dataclass (`runtimes/registry.py`)."""
    node = {} if node is None else node
    if not isinstance(node, dict):
        raise ConfigError(f"config node runtime must be a mapping, got {node!r}")
    kind = node.get("kind", LocalRuntimeConfig.kind)
    spec = runtime_spec(kind)
    for key in sorted(set(spec.refused_keys) & set(node)):
        raise ConfigError(f"runtime.{key} does not apply to runtime={kind}: {spec.refused_keys[key]}")
    return build(spec.config_class, node, "runtime", note=f" (runtime={kind})", moved=spec.moved_keys)


def resolved_of(typed: HarnessConfig) -> dict[str, Any]:
    """Every key of `typed` (defaults included) as the mapping `composed_from` reads back: what
    the run directory's config.yaml and `--agentcore-rl-show-config` hold."""
    out = plain(dataclasses.replace(typed, trainer=None, logger={}))
    section = typed.trainer
    loop = plain(section.loop)
    out["trainer"] = {**plain(section.trainer), **{k: loop[k] for k in LOOP_KEYS}}
    out["algo"] = {**plain(section.algo), **{k: loop[k] for k in GROUP_KEYS}}
    out["logger"] = {name: plain(node) for name, node in typed.logger.items()}
    return out


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
    rest = {k: v for k, v in resolved.items() if k not in ("runtime", "trainer", "algo", "logger")}
    if "agent" in rest and rest["agent"] is None:  # Hydra reads `agent=null` as None
        rest["agent"] = "null"
    typed = build(HarnessConfig, rest, "", extra_valid=("runtime", "trainer", "algo", "logger"))
    typed = dataclasses.replace(
        typed,
        runtime=build_runtime_node(resolved.get("runtime")),
        trainer=build_trainer_section(resolved.get("trainer") or {}, resolved.get("algo") or {}),
        logger=build_logger_section(resolved.get("logger")),
    )
    for key, choices in VALID_CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(typed, section), name)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is not supported; valid choices: {list(choices)}")
    for section in (typed.runtime, typed.gateway, typed.eval, typed.gates, typed.report, typed.warmup, typed.roles, typed.recipe):
        section.validate()
    check_agent(typed.agent, typed.runtime.kind)
    check_warmup(typed)
    return ComposedConfig(typed=typed, resolved=resolved_of(typed), overrides=overrides, source=source)


def settable_override(override: str) -> str:
    """`section.key=value` (or a root key, `seed=1`) as `++...` (add or set) under a typed node.

    The YAML group files hold only what differs from the dataclass defaults, so most keys are
    missing from the composed node and Hydra's struct mode would refuse them. Every typed key has
    a default, so any key under a typed node may be added; `build` refuses an unknown one with
    the closest valid key and the node's list. Group choices (`runtime=agentcore`) stay plain.
    """
    key, sep, _ = override.partition("=")
    if not sep or key[:1] in "+~" or "@" in key:
        return override
    section = key.split(".", 1)[0]
    if section == "logger" and key.count(".") >= 2:
        return "++" + override  # logger.<tracker>.<key>: the tracker's node checks the key
    typed = ({f.name for f in dataclasses.fields(HarnessConfig)} | set(_SPLIT_NODES)) - {"logger"}
    if "." not in key:
        return "++" + override if key in typed - set(_available_groups()) else override
    return "++" + override if section in typed and node_classes(section) else override


def _as_typed(override: str) -> str:
    """An override as the user wrote it: without the `++` that `settable_override` added."""
    return override[2:] if override.startswith("++") and settable_override(override[2:]) == override else override


def _explain_hydra_error(exc: Exception, overrides: tuple[str, ...], project: Path | None) -> str:
    text = str(exc).strip()
    groups = _available_groups(project)
    match = re.search(r"Could not (?:override|append to) '([^'.]+)'", text)
    if match and match.group(1) not in groups:
        roots = sorted({f.name for f in dataclasses.fields(HarnessConfig)} | set(groups))
        return f"bad config override in {list(overrides)}: {unknown_key_message([match.group(1)], roots, '')}"
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
