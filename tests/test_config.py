import pytest

from agentcore_rl_harness.config import compose_config, default_config_source
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.run.training import TrainPlan


def test_packaged_defaults_are_the_embedded_default():
    cfg = compose_config().typed
    assert cfg.model.name == "smollm2-135m-instruct"
    assert (cfg.sampler.kind, cfg.runtime.kind, cfg.gateway.host) == ("hf", "local", "127.0.0.1")
    assert cfg.eval.split == "test"


def test_overrides_reach_typed_nodes():
    composed = compose_config(["model=tiny", "sampling.temperature=0.5", "eval.max_rows=3"])
    assert composed.typed.model.name == "tiny"
    params = composed.typed.sampling.to_params()
    assert params.temperature == 0.5 and params.top_k == 0
    assert composed.resolved["eval"]["max_rows"] == 3
    assert composed.overrides == ("model=tiny", "sampling.temperature=0.5", "eval.max_rows=3")


@pytest.mark.parametrize(
    "override, message",
    [
        ("model=nope", "Could not find 'model/nope'"),
        ("eval.nokey=1", "unknown config key(s) `nokey` under eval; valid keys of eval: max_rows, samples, "
                         "split, temperature, timeout_s"),
        ("+eval.nokey=1", "unknown config key(s) `nokey` under eval"),
        ("eval.max_row=3", "did you mean `max_rows` (not `max_row`)?"),
        ("trainer.stepz=2", "did you mean `steps` (not `stepz`)? valid keys of trainer (trainer=local): "
                            "adam_beta1, adam_beta2, adam_eps, autocast_dtype, batch_rows, checkpoint_every"),
        ("runtime.limits.memroy_mb=2", "did you mean `memory_mb` (not `memroy_mb`)? valid keys of "
                                       "runtime.limits: file_size_mb, memory_mb, open_files, processes"),
        ("sede=1", "did you mean `seed` (not `sede`)?"),
        ("eval.max_rows=abc", "eval.max_rows must be int"),
        ("sampling.temperature=hot", "sampling.temperature must be float"),
        ("runtime.kind=bogus", "valid choices: ['local', 'agentcore']"),
        ("trainer.mode=asinc", "trainer.mode='asinc' is not a training mode; valid choices: ['sync', 'async']"),
        ("algo.stragglers=skip",
         "algo.stragglers='skip' is not a straggler policy; valid choices: ['wait', 'drop', 'partial']"),
        ("algo.min_group_fraction=0", "algo.min_group_fraction=0.0 must be in (0, 1]"),
        ("algo.min_group_fraction=1.5", "algo.min_group_fraction=1.5 must be in (0, 1]"),
        ("algo.max_staleness=-1", "algo.max_staleness=-1 must be >= 0"),
    ],
)
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ConfigError) as info:
        compose_config([override])
    assert message in str(info.value)


def test_async_mode_keys_reach_the_loop_and_async_refuses_overlap_rollouts():
    loop = compose_config(["trainer.mode=async", "algo.max_staleness=3", "algo.stragglers=drop"]).typed.trainer.loop
    assert (loop.mode, loop.max_staleness, loop.stragglers) == ("async", 3, "drop")
    config = compose_config(["trainer.mode=async", "algo.stragglers=partial", "algo.min_group_fraction=0.75"])
    plan = TrainPlan.from_config(config.typed)
    assert (plan.stragglers, plan.min_group_fraction) == ("partial", 0.75)
    with pytest.raises(ConfigError, match="trainer.mode=async already overlaps rollouts with updates; set "
                                          r"trainer.overlap_rollouts=false \(or trainer.mode=sync\)"):
        compose_config(["trainer.mode=async", "trainer.overlap_rollouts=true"])


def test_project_dir_extends_packaged_defaults(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("name: /some/folder\n")
    (tmp_path / "config.yaml").write_text(
        "defaults:\n  - agentcore_rl_base\n  - override model: mine\n  - _self_\nseed: 7\n"
    )
    typed = compose_config(source=tmp_path).typed
    assert (typed.model.name, typed.seed, typed.runtime.kind) == ("/some/folder", 7, "local")
    # the packaged groups stay selectable
    assert compose_config(["model=tiny"], source=tmp_path).typed.model.name == "tiny"


def test_single_composed_yaml_file(tmp_path):
    resolved = compose_config(["model=tiny"]).resolved
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(resolved))
    again = compose_config(["eval.max_rows=1"], source=path)
    assert again.typed.model.name == "tiny" and again.typed.eval.max_rows == 1


def test_missing_config_yaml_and_bad_path(tmp_path):
    with pytest.raises(ConfigError, match="has no config.yaml"):
        compose_config(source=tmp_path)
    with pytest.raises(ConfigError, match="not a directory with config.yaml"):
        compose_config(source=tmp_path / "x.txt")


def test_default_source_is_project_configs(tmp_path):
    assert default_config_source(tmp_path) is None
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "config.yaml").write_text("defaults: [agentcore_rl_base, _self_]\n")
    assert default_config_source(tmp_path) == tmp_path / "configs"


def test_agentcore_runtime_config_and_the_loopback_check():
    from agentcore_rl_harness.run.compose import check_public_gateway_url

    typed = compose_config([
        "runtime=agentcore",
        "+runtime.arns.test_arith=arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/x",
        "gateway.public_url=https://gw.example.com/v1",
    ]).typed
    assert typed.runtime.kind == "agentcore"
    assert typed.runtime.arns == {"test_arith": "arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/x"}
    assert check_public_gateway_url("https://gw.example.com/v1") == "https://gw.example.com/v1"
    for url in ("http://127.0.0.1:8000/v1", "http://localhost:1/v1", "http://0.0.0.0:9/v1"):
        with pytest.raises(ConfigError, match="AgentCore cannot reach"):
            check_public_gateway_url(url)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer=tinker", "algo.kl_coef=0.1"], "set algo.kl_coef=0"),
        (["trainer=tinker", "algo.tis_cap=2.0"], "set trainer.loss_fn=cispo"),
        (
            ["trainer=sagemaker", "trainer.region=us-west-2", "trainer.role_arn=arn:aws:iam::1:role/r",
             "trainer.model_package_group=arn:aws:sagemaker:us-west-2:1:model-package-group/g",
             "trainer.s3_output_path=s3://b/p", "trainer.base_model=arn:aws:sagemaker:us-west-2:aws:hub-content/x",
             "algo.kl_coef=0.1"],
            "set algo.kl_coef=0",
        ),
    ],
)
def test_service_trainers_reject_algo_knobs_when_the_config_is_composed(overrides, message):
    # Before any model loads or any (billed) session starts: at compose time.
    with pytest.raises(ConfigError, match=message):
        compose_config(overrides)


@pytest.mark.parametrize("kind", ["local", "tinker", "skyrl", "sagemaker", "verl", "slime"])
def test_every_registered_trainer_has_a_packaged_config_group(kind):
    from agentcore_rl_harness.trainers.registry import TRAINERS

    assert kind in TRAINERS
    required = {"sagemaker": "trainer.region", "skyrl": "trainer.base_url"}
    if kind in required:
        with pytest.raises(ConfigError, match=required[kind]):  # required fields are named
            compose_config([f"trainer={kind}"])
    else:
        assert compose_config([f"trainer={kind}"]).typed.trainer.trainer.kind == kind


def test_gateway_history_and_gc_freeze_reach_the_typed_config():
    typed = compose_config(["gateway.history=template", "gateway.gc_freeze=true"]).typed
    assert (typed.gateway.history, typed.gateway.gc_freeze) == ("template", True)
    with pytest.raises(ConfigError, match="valid choices: \\['exact', 'template'\\]"):
        compose_config(["gateway.history=fuzzy"])


def test_gateway_session_limits_are_config_with_the_records_defaults():
    from agentcore_rl_harness.records import SessionLimits

    assert compose_config().typed.gateway.limits() == SessionLimits()  # the yaml repeats them exactly
    typed = compose_config(["gateway.max_turns=10000", "gateway.idle_ttl_s=60",
                            "gateway.max_lifetime_s=null", "gateway.context_budget_tokens=32768"]).typed
    assert typed.gateway.limits() == SessionLimits(max_turns=10000, idle_ttl_s=60.0, max_lifetime_s=None,
                                                   context_budget_tokens=32768)


def test_non_positive_gateway_limit_names_the_key():
    with pytest.raises(ConfigError, match=r"gateway.idle_ttl_s=0.0 must be > 0, or null"):
        compose_config(["gateway.idle_ttl_s=0"])


def test_one_history_mode_vocabulary_with_one_wording():
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer  # noqa: F401
    from agentcore_rl_harness.gateway.trajectory import TurnTree
    from agentcore_rl_harness.records import HISTORY_MODES, HistoryMode

    assert HISTORY_MODES == ("exact", "template")
    assert HistoryMode.parse("template") is HistoryMode.TEMPLATE
    with pytest.raises(ConfigError, match=r"history='sometimes' is not a history mode; choose one of exact, template"):
        TurnTree(renderer=None, history="sometimes")
    with pytest.raises(ConfigError, match=r"gateway.history='sometimes' is not supported; valid choices: \['exact', 'template'\]"):
        compose_config(["gateway.history=sometimes"])


def _drift(section, path):
    """Fields whose packaged-YAML value differs from the typed config's own default."""
    import dataclasses

    try:
        default = type(section)()
    except TypeError:  # a section of sections (the trainer): walk into each
        default = None
    found = []
    for item in dataclasses.fields(section):
        value = getattr(section, item.name)
        if dataclasses.is_dataclass(value):
            found += _drift(value, f"{path}.{item.name}")
        elif default is not None:
            expected = getattr(default, item.name)
            norm = (lambda v: list(v) if isinstance(v, tuple) else v)
            if norm(expected) != norm(value):
                found.append(f"{path}.{item.name}: yaml {value!r} != dataclass {expected!r}")
    return found


# Keys whose YAML value is an interpolation, not a default: the run's own seed.
INTERPOLATED = {"trainer.trainer.lora_seed"}


@pytest.mark.parametrize("trainer", ["local", "tinker"])
def test_packaged_yaml_defaults_equal_the_typed_defaults(trainer):
    """Defaults are written in the typed configs and repeated in the packaged YAML (so the run's
    config.yaml shows them): this keeps the two from drifting."""
    import dataclasses

    typed = compose_config([f"trainer={trainer}"]).typed
    drift = []
    for item in dataclasses.fields(typed):
        value = getattr(typed, item.name)
        if dataclasses.is_dataclass(value) and item.name != "model":
            drift += _drift(value, item.name)
    assert [line for line in drift if line.split(":")[0] not in INTERPOLATED] == []


def test_one_sampling_default_for_runs_and_the_gateway():
    from agentcore_rl_harness.config import SamplingConfig
    import inspect

    from agentcore_rl_harness.gateway.server import GatewayServer
    from agentcore_rl_harness.records import SamplingParams

    server_default = inspect.signature(GatewayServer).parameters["sampling"].default
    assert SamplingConfig().to_params() == SamplingParams() == server_default
    assert compose_config([]).typed.sampling == SamplingConfig()
    assert SamplingParams().max_tokens == 128  # what runs without sampling.max_tokens have used


def test_admin_sampling_defaults_are_the_sampling_params_defaults():
    from agentcore_rl_harness.gateway.app import AdminSampling
    from agentcore_rl_harness.records import SamplingParams

    admin, params = AdminSampling(), SamplingParams()
    assert (admin.temperature, admin.top_p, admin.top_k, admin.max_tokens) == (
        params.temperature, params.top_p, params.top_k, params.max_tokens)
