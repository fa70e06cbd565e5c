"""Every tensor the in-process sampler and the local trainer build names its device.

A torch factory call without `device=` lands on the CPU; with the model on a GPU
(`trainer.device=cuda`, which moves the model the in-process sampler shares) the next forward
fails with a device mismatch. No GPU is at hand in CI, so this reads the source: every factory
call in these modules passes `device=` (the model's, or "cpu" where a tensor is filled on the host
and moved in one copy). `bench/gpu/smoke.py` proves the same on a real GPU.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import agentcore_rl_harness

ROOT = Path(agentcore_rl_harness.__file__).parent
MODULES = ("samplers/hf_local.py", "samplers/_kv.py", "samplers/decoding.py", "samplers/_fp32_attention.py",
           "trainers/local.py", "trainers/_prefix.py", "trainers/ratios.py", "trainers/grpo.py",
           "trainers/sft.py")
FACTORIES = {"tensor", "as_tensor", "arange", "zeros", "ones", "full", "empty", "rand", "randn",
             "randint", "linspace", "eye", "Generator"}


def factory_calls_without_device(source: str) -> list[str]:
    """`torch.<factory>(...)` calls in `source` that pass no `device=` keyword, as 'line: call'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func
        if target.attr in FACTORIES and isinstance(target.value, ast.Name) and target.value.id == "torch":
            if not any(keyword.arg == "device" for keyword in node.keywords):
                found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize("module", MODULES)
def test_every_tensor_factory_names_its_device(module):
    assert factory_calls_without_device((ROOT / module).read_text(encoding="utf-8")) == [], (
        f"{module}: pass device= (the model's: samplers/_kv.device_of) to these calls")


def test_the_check_finds_a_factory_without_device():
    source = "import torch\nx = torch.zeros((2, 3), dtype=torch.long)\ny = torch.arange(4, device=d)\n"
    assert factory_calls_without_device(source) == ["2: torch.zeros((2, 3), dtype=torch.long)"]


def test_device_of_is_where_the_weights_are():
    from agentcore_rl_harness.samplers._kv import device_of

    assert device_of(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert device_of(torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")
    assert device_of(torch.nn.Identity()) == torch.device("cpu")  # no weights: the host
