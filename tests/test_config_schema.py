"""Defaults live only in the dataclasses: every key of a packaged YAML group file is known to its
node, and holds a value the node's default does not (a default option holds none at all)."""

from __future__ import annotations

import dataclasses
import re
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from agentcore_rl_harness import config as cfg
from agentcore_rl_harness.config_schema import default_of
from agentcore_rl_harness.runtimes.registry import RUNTIMES
from agentcore_rl_harness.trackers import registry as trackers
from agentcore_rl_harness.trainers.grpo import GRPOConfig
from agentcore_rl_harness.trainers.registry import TRAINERS

CONF = Path(str(files("agentcore_rl_harness.conf")))
BASE = yaml.safe_load((CONF / "agentcore_rl_base.yaml").read_text())
DEFAULT_OPTIONS = {next(iter(d)): next(iter(d.values())) for d in BASE["defaults"] if isinstance(d, dict)}
# Keys other YAML values interpolate (${seed}): they must exist in the composed config.
INTERPOLATED = set(re.findall(r"\$\{([\w.]+)\}", "".join(p.read_text() for p in CONF.rglob("*.yaml"))))


def _classes(group: str, node: dict, option: str) -> list[type]:
    kind = node.get("kind") or DEFAULT_OPTIONS.get(group)
    if not node:
        return []
    if group == "runtime":
        return [RUNTIMES[kind].config_class]
    if group == "trainer":
        return [cfg.TrainLoopConfig, TRAINERS[kind].load_config_class()]
    if group == "algo":
        return [cfg.TrainLoopConfig, GRPOConfig]
    if group == "logger":
        return [trackers.tracker_module(option).Config]
    return cfg.node_classes(group)


def _problems(classes: list[type], node: dict, where: str, *, default_option: bool) -> list[str]:
    fields = {f.name: f for c in classes for f in dataclasses.fields(c)}
    problems = []
    for key, value in node.items():
        path = f"{where}.{key}"
        if key not in fields:
            problems.append(f"{path}: unknown to {[c.__name__ for c in classes]}")
            continue
        if key == "kind" or path.split(":", 1)[-1].lstrip(".") in INTERPOLATED or (isinstance(value, str) and "${" in value):
            continue
        default = default_of(fields[key])
        hint = fields[key].type
        if dataclasses.is_dataclass(fields[key].default_factory if fields[key].default_factory
                                    is not dataclasses.MISSING else None) and isinstance(value, dict):
            nested = fields[key].default_factory
            problems += _problems([nested], value, path, default_option=default_option)
            continue
        same = value == default or (isinstance(default, float) and value == default)
        if same:
            problems.append(f"{path}={value!r} restates the default of {hint}")
        elif default_option and default is not dataclasses.MISSING:
            problems.append(f"{path}={value!r} contradicts the default {default!r} in the default option")
    return problems


def _group_files():
    for path in sorted(CONF.glob("*/*.yaml")):
        yield pytest.param(path, id=f"{path.parent.name}/{path.name}")


@pytest.mark.parametrize("path", _group_files())
def test_group_file_holds_only_what_differs_from_its_node(path):
    group, option = path.parent.name, path.stem
    node = yaml.safe_load(path.read_text()) or {}
    problems = _problems(_classes(group, node, option), node, f"{group}/{option}:{group}",
                         default_option=DEFAULT_OPTIONS.get(group) == option)
    assert not problems, "\n".join(problems)


def test_base_file_holds_only_what_differs_from_its_nodes():
    problems = []
    for key, value in BASE.items():
        if key == "defaults":
            continue
        if isinstance(value, dict):
            classes = _classes(key, value, DEFAULT_OPTIONS.get(key, ""))
            problems += _problems(classes, value, f"base:{key}", default_option=True)
        else:
            problems += _problems([cfg.HarnessConfig], {key: value}, "base:", default_option=True)
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_restated_and_an_unknown_key():
    assert _problems([cfg.EvalConfig], {"split": "test", "spilt": "x", "samples": 3}, "eval",
                     default_option=False) == ["eval.split='test' restates the default of str",
                                               "eval.spilt: unknown to ['EvalConfig']"]


def test_each_runtime_kind_has_its_own_concurrency_default():
    assert cfg.compose_config(["model=tiny"]).typed.runtime.concurrency == 8
    composed = cfg.compose_config(["model=tiny", "runtime=agentcore", "+runtime.arns.test_x=arn:aws:x:us-west-2:1:r"])
    assert composed.typed.runtime.concurrency == 32
    assert cfg.compose_config(["runtime=agentcore", "runtime.concurrency=4"]).typed.runtime.concurrency == 4


def test_every_key_of_the_configuration_reference_says_what_it_does():
    """A new key needs its doc line: a comment beside the field, or a string just below it."""
    from agentcore_rl_harness.config_reference import reference

    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in reference().splitlines() if line.startswith("| `")]
    assert len(rows) > 200 and all(len(row) == 4 for row in rows)
    assert [key for key, _, _, doc in rows if not doc] == []  # trainer=skyrl's inherit tinker's docs


def test_the_configuration_reference_is_up_to_date():
    from agentcore_rl_harness.config_reference import main, reference

    page = Path(__file__).resolve().parents[1] / "docs" / "reference" / "configuration.md"
    assert main(["--check", str(page)]) == 0, "run: python -m agentcore_rl_harness.config_reference"
    text = reference()
    for row in ("| `runtime.concurrency` | int | `8` |", "| `runtime.concurrency` | int | `32` |",
                "| `runtime.limits.memory_mb` | int \\| null | `8192` |", "| `gateway.max_turns` |",
                "| `trainer.steps` | int | `20` |", "| `gateway.tls.certfile` |"):
        assert row in text, row
