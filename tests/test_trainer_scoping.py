"""A project config's settings for one trainer kind do not stop a switch to another: the bundled
configs/config.yaml sets `trainer.lr` (the in-process trainers' knob), and `trainer=verl` or
`trainer=slime` still composes, saying which keys it left out (issue 12 item 5)."""

import shutil
from pathlib import Path

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.trainers.section import dropped_keys_message
from agentcore_rl_harness.errors import ConfigError, ConfigWarning

ROOT = Path(__file__).resolve().parents[1]
BUNDLED_CONFIGS = ROOT / "configs"


@pytest.mark.parametrize("kind", ["verl", "slime"])
def test_an_external_trainer_composes_with_the_bundled_configs(kind):
    with pytest.warns(ConfigWarning, match=rf"trainer={kind} has no trainer.lr"):
        section = compose_config([f"trainer={kind}"], source=BUNDLED_CONFIGS).typed.trainer
    assert section.trainer.kind == kind and section.dropped == ("lr",)
    assert (section.loop.steps, section.loop.batch_rows) == (6, 4)  # the loop keys still apply
    assert "another trainer kind" in dropped_keys_message(section)


def test_the_chosen_kind_keeps_its_settings_and_typos_stay_errors(recwarn):
    section = compose_config([], source=BUNDLED_CONFIGS).typed.trainer
    assert section.trainer.lr == 1.0e-4 and section.dropped == () and dropped_keys_message(section) is None
    assert not [w for w in recwarn if issubclass(w.category, ConfigWarning)]
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) `lrr` under trainer \(trainer=verl\); valid keys"):
        compose_config(["trainer=verl", "+trainer.lrr=1"], source=BUNDLED_CONFIGS)


def test_a_key_of_the_chosen_kind_is_not_dropped_even_if_others_have_it():
    section = compose_config(["trainer=tinker", "trainer.lr=3e-5"], source=BUNDLED_CONFIGS).typed.trainer
    assert section.trainer.lr == 3e-5 and section.dropped == ()


def test_pytest_with_trainer_verl_on_the_bundled_tasks_composes(pytester):
    for name in ("configs", "tasks", "agents"):
        shutil.copytree(ROOT / name, pytester.path / name)
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "trainer=verl",
                                "--collect-only", "-q", "tasks")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*agentcore-rl config: trainer=verl has no trainer.lr: a setting of another "
                                 "trainer kind, ignored*", "*test_arith.py::test_arith*"])
    assert "UsageError" not in result.stderr.str()
