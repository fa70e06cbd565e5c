"""Config mistakes as a user meets them on the command line: a typo in a key (on the command line
or in a config file) is a usage error naming the closest key and every valid key of its node;
`--agentcore-rl-show-config` prints the composed config and runs nothing."""

from __future__ import annotations

import pytest

TASK = """
import agentcore_rl_harness as arl

@arl.task(dataset=[{"q": 1}], agent="agent.py")
def test_echo(rollout, row):
    assert False, "a task ran although nothing should run"
"""


def test_show_config_prints_every_key_and_runs_nothing(pytester):
    pytester.makepyfile(test_task=TASK)
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-show-config",
                                "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "runtime.concurrency=3")
    assert result.ret == 0
    text = result.stdout.str()
    assert "overrides: ['model=tiny', 'runtime.concurrency=3']" in text
    assert "  concurrency: 3" in text and "  memory_mb: 8192" in text  # a default from the dataclass
    assert "  max_turns: 4096" in text and "  steps: 20" in text
    assert "config shown, nothing run" in text and "a task ran" not in text
    assert not (pytester.path / "outputs").exists()


def test_a_cli_key_typo_names_the_key_meant_and_every_valid_key(pytester):
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "trainer.stepz=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "did you mean `steps` (not `stepz`)?" in err
    for key in ("steps", "batch_rows", "checkpoint_every", "overlap_rollouts", "lr", "lora_rank"):
        assert f" {key}," in err or f" {key}\n" in err or err.rstrip().endswith(key), key
    assert "+trainer.stepz" not in err  # not Hydra's advice to add the typo


def test_a_config_file_typo_is_named_too(pytester):
    pytester.mkdir("configs")
    (pytester.path / "configs" / "config.yaml").write_text(
        "defaults: [agentcore_rl_base, _self_]\ngateway:\n  max_turn: 8\n")
    result = pytester.runpytest("--agentcore-rl", "eval")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "unknown config key(s) `max_turn` under gateway; did you mean `max_turns` (not `max_turn`)?" in err
    assert "valid keys of gateway: " in err and "keep_alive_s" in err


def test_show_config_with_a_typo_is_the_same_usage_error(pytester):
    result = pytester.runpytest("--agentcore-rl-show-config", "--agentcore-rl-set", "runtime.concurency=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "did you mean `concurrency`" in result.stderr.str()


def test_option_mistakes_are_usage_errors_before_any_run_directory(pytester):
    """RunOptions checks every --agentcore-rl* option when pytest configures, before a run exists."""
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-compare", "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--agentcore-rl-compare 'nope': not a run directory" in result.stderr.str()
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-save-baseline", "../x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "use a plain name like 'main'" in result.stderr.str()
    assert not (pytester.path / "outputs").exists()
