"""`recipe/startup.py`, `dtypes.py`, `explicit.py`: the start-up choices of recipe=auto, each
triggered by a constructed machine / model / task that needs it, and not where it is not needed."""

import json

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.recipe.choices import Choice
from agentcore_rl_harness.recipe.config import RecipeConfig
from agentcore_rl_harness.recipe.dtypes import DtypeMeasurement, cpu_bf16_flags, measure
from agentcore_rl_harness.recipe.explicit import explicit_keys, file_keys, override_keys
from agentcore_rl_harness.recipe.startup import StartupInputs, parameter_count, startup_choices

SLOW_BF16 = DtypeMeasurement(serve_speedup=0.02, forward_backward_speedup=0.2, cpu_flags=(), seconds=0.4)
FAST_BF16 = DtypeMeasurement(serve_speedup=3.1, forward_backward_speedup=1.9, cpu_flags=("amx_bf16",), seconds=0.3,
                             width=576)
CURRENT = {"trainer.autocast_dtype": None, "trainer.serve_dtype": None, "trainer.lora_rank": 16,
           "trainer.lr": 1e-4, "sampling.max_tokens": 128}


def inputs(**changes):
    values = dict(trainer_kind="local", finetune="lora", serve_merged=True, cuda=False, cuda_bf16=False,
                  parameters=135_000_000, hidden_size=576, oracle_turn_tokens=(), oracle_rows=0, current=CURRENT)
    return StartupInputs(**{**values, **changes})


def choose(explicit=(), measured=SLOW_BF16, **changes):
    calls = []

    def measure_once(width):
        calls.append(width)
        return measured

    choices, observed = startup_choices(RecipeConfig(), inputs(**changes), frozenset(explicit), measure_once)
    return {c.key: c for c in choices}, observed, calls


def test_bf16_is_chosen_only_where_this_machine_measures_it_faster():
    slow, observed, calls = choose(measured=SLOW_BF16)
    assert calls and slow["trainer.autocast_dtype"].value is None and slow["trainer.serve_dtype"].value is None
    assert "not 1.3x faster" in slow["trainer.autocast_dtype"].reason and "0.02x" in slow["trainer.autocast_dtype"].reason
    assert observed["dtype_benchmark"]["forward_backward_speedup"] == 0.2
    fast, _, calls = choose(measured=FAST_BF16)
    assert fast["trainer.autocast_dtype"].value == fast["trainer.serve_dtype"].value == "bfloat16"
    assert "amx_bf16" in fast["trainer.autocast_dtype"].line()
    assert calls == [576] and "at width 576" in fast["trainer.serve_dtype"].reason  # the model's width


def test_serving_and_training_dtypes_follow_their_own_measurements():
    # this 2-core AMX CPU at SmolLM2-135M's width: decoding 2.2x in bf16, a training step 1.2x (noisy)
    serve_only = DtypeMeasurement(serve_speedup=2.2, forward_backward_speedup=1.2, cpu_flags=("amx_bf16",),
                                  seconds=0.3, width=576)
    choices, _, _ = choose(measured=serve_only)
    assert choices["trainer.serve_dtype"].value == "bfloat16" and "serving is faster" in choices["trainer.serve_dtype"].reason
    assert choices["trainer.autocast_dtype"].value is None
    assert "training is not 1.3x faster" in choices["trainer.autocast_dtype"].reason
    train_only = DtypeMeasurement(serve_speedup=0.9, forward_backward_speedup=1.6, cpu_flags=(), seconds=0.3)
    choices, _, _ = choose(measured=train_only)
    assert choices["trainer.autocast_dtype"].value == "bfloat16" and choices["trainer.serve_dtype"].value is None
    unmerged, _, _ = choose(measured=serve_only, serve_merged=False)  # no serving copy to cast
    assert "trainer.serve_dtype" not in unmerged


def test_a_small_model_or_a_gpu_needs_no_benchmark():
    small, _, calls = choose(parameters=95_000, measured=FAST_BF16)
    assert not calls and small["trainer.autocast_dtype"].value is None and "95,000 parameters" in small["trainer.autocast_dtype"].reason
    gpu, _, calls = choose(cuda=True, cuda_bf16=True)
    assert not calls and gpu["trainer.autocast_dtype"].value == "bfloat16"
    other, _, calls = choose(trainer_kind="tinker")
    assert not calls and other == {}


def test_an_explicit_key_keeps_its_value_and_the_line_says_what_the_recipe_would_pick():
    choices, _, _ = choose(explicit={"trainer.autocast_dtype", "trainer.lr"}, measured=FAST_BF16)
    kept = choices["trainer.autocast_dtype"]
    assert not kept.applied and kept.value is None and "would choose 'bfloat16'" in kept.reason
    assert "stays None" in kept.line()
    assert choices["trainer.serve_dtype"].applied and choices["trainer.serve_dtype"].value == "bfloat16"
    assert not choices["trainer.lr"].applied and choices["trainer.lr"].value == 1e-4


def test_max_tokens_comes_from_the_oracles_longest_turn_only_where_there_is_an_oracle():
    choices, _, _ = choose(oracle_turn_tokens=(12, 55, 30), oracle_rows=3)
    assert choices["sampling.max_tokens"].value == 96  # 55 x 1.5 = 82.5, rounded up to 16
    assert "longest turn is 55 tokens" in choices["sampling.max_tokens"].reason
    none, _, _ = choose()
    assert "sampling.max_tokens" not in none


def test_lora_rank_and_lr_follow_the_model_size():
    small, _, _ = choose(parameters=135_000_000)
    big, _, _ = choose(parameters=8_000_000_000)
    assert (small["trainer.lora_rank"].value, small["trainer.lr"].value) == (16, 3e-4)
    assert (big["trainer.lora_rank"].value, big["trainer.lr"].value) == (32, 1e-4)
    full, _, _ = choose(finetune="full", parameters=135_000_000)
    assert "trainer.lora_rank" not in full and full["trainer.lr"].value == pytest.approx(3e-5)


def test_parameter_count_reads_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 576, "num_hidden_layers": 30, "vocab_size": 49152, "intermediate_size": 1536,
        "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True}))
    assert 130e6 < parameter_count(tmp_path) < 140e6  # SmolLM2-135M
    assert parameter_count(tmp_path / "missing") is None


def test_the_benchmark_is_quick_and_the_cpu_flags_are_read(tmp_path):
    measured = measure()
    assert measured.seconds < 3 and measured.serve_speedup > 0 and measured.forward_backward_speedup > 0
    assert measured.width == 128
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_bf16_flags(cpuinfo) == ("avx512_bf16", "amx_bf16")
    assert cpu_bf16_flags(tmp_path / "none") == ()


def test_explicit_keys_come_from_overrides_and_the_users_config_file(tmp_path):
    assert override_keys(["++trainer.lr=1", "model=tiny", "~x", "sampling.max_tokens=5"]) >= {
        "trainer.lr", "trainer", "model", "sampling.max_tokens"}
    config = tmp_path / "lift.yaml"
    config.write_text("defaults: [agentcore_rl_base, _self_]\ntrainer:\n  autocast_dtype: bfloat16\n")
    assert file_keys(str(config)) == {"trainer", "trainer.autocast_dtype"}
    assert file_keys("pkg://agentcore_rl_harness.conf") == set()
    assert "trainer.autocast_dtype" in explicit_keys(["seed=1"], str(config))


def test_the_recipe_node_is_auto_by_default_and_checks_its_bounds():
    assert compose_config([]).typed.recipe.kind == "auto"
    assert compose_config(["recipe=none"]).typed.recipe.kind == "none"
    with pytest.raises(ConfigError, match="recipe.warmup_threshold=1.5 must be a fraction"):
        compose_config(["recipe.warmup_threshold=1.5"])
    with pytest.raises(ConfigError, match="recipe.max_group_size=0 must be >= 1"):
        compose_config(["recipe.max_group_size=0"])
    with pytest.raises(ConfigError, match="valid choices"):
        RecipeConfig(kind="bogus").validate()
    assert Choice("k", 1, "why").line() == "agentcore-rl recipe (start-up): k = 1: why"


def test_the_benchmark_measures_at_the_models_width_capped_and_skips_it_where_bf16_is_hopeless(monkeypatch):
    from agentcore_rl_harness.recipe import dtypes

    widths = []

    def fake(torch, width, tokens, rows, repeats):
        widths.append(width)
        return speedups[width]

    monkeypatch.setattr(dtypes, "_measure", fake)
    speedups = {128: (0.9, 0.8), 576: (2.2, 1.5), dtypes.MAX_WIDTH: (3.0, 2.2)}
    assert dtypes.measure(576).width == 576 and widths == [128, 576]  # AMX: slower when small, faster at 576
    assert dtypes.measure(576).forward_backward_speedup == 1.5
    widths.clear()
    assert dtypes.measure(8192).width == dtypes.MAX_WIDTH and widths == [128, dtypes.MAX_WIDTH]
    widths.clear()
    speedups[128] = (0.02, 0.2)  # an AVX2 CPU: bf16 44x slower; the wide run would take minutes
    hopeless = dtypes.measure(4096)
    assert widths == [128] and hopeless.width == 128 and hopeless.serve_speedup == 0.02


def test_the_real_benchmark_at_a_models_width_stays_quick():
    measured = measure(576)
    assert measured.width in (128, 576) and measured.seconds < 5
