"""A trainer checkpoint directory: weights, optimizer state, counters and RNG states.

Layout: `trainer_state.json` (format, step, policy_version, finetune mode), `weights.pt` (the
trainable tensors by parameter name), `optimizer.pt`, `rng.pt` (python and torch generators),
and for LoRA an `adapter/` folder that peft can load for serving. The directory is written beside
its final place and renamed into it, so a killed save never leaves a half checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HarnessError

FORMAT_VERSION = 1
STATE_FILE = "trainer_state.json"


class CheckpointError(HarnessError):
    """A checkpoint cannot be read or does not fit this trainer."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    policy_version: int
    finetune: str
    weights: dict[str, Any]
    optimizer_state: dict[str, Any]
    rng_state: dict[str, Any]


def rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_dir_atomically(path: str | os.PathLike[str], fill: Callable[[Path], None]) -> Path:
    """Build a directory with `fill(build_dir)` beside `path`, then rename it into place.

    A crash leaves either the old directory or the new one, never a half-written `step-N` that a
    resume would pick up; an existing directory at `path` is moved aside first, then removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        fill(build)
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}"
            os.replace(target, old)
        os.replace(build, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return target


def write_json_dir(path: str | os.PathLike[str], filename: str, record: dict[str, Any]) -> Path:
    """A checkpoint directory holding one JSON record (service trainers: the remote state's id)."""
    return write_dir_atomically(
        path, lambda build: (build / filename).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    )


def save(
    path: str | os.PathLike[str],
    *,
    step: int,
    policy_version: int,
    finetune: str,
    weights: dict[str, Any],
    optimizer_state: dict[str, Any],
    write_extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write a checkpoint directory atomically (replacing one already at `path`)."""
    import torch

    def fill(build: Path) -> None:
        torch.save({name: tensor.detach().cpu() for name, tensor in weights.items()}, build / "weights.pt")
        torch.save(optimizer_state, build / "optimizer.pt")
        torch.save(rng_state(), build / "rng.pt")
        if write_extra is not None:
            write_extra(build)
        state = {
            "format_version": FORMAT_VERSION,
            "step": step,
            "policy_version": policy_version,
            "finetune": finetune,
        }
        (build / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")

    return write_dir_atomically(path, fill)


def load(path: str | os.PathLike[str]) -> Checkpoint:
    import torch

    folder = Path(path)
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"{folder} is not a trainer checkpoint (cannot read {STATE_FILE}: {exc}); pass a "
            "directory written by save_checkpoint"
        ) from exc
    if state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {folder} has format_version {state.get('format_version')!r}; this "
            f"version of agentcore-rl-harness reads format {FORMAT_VERSION}"
        )
    try:
        weights = torch.load(folder / "weights.pt", map_location="cpu", weights_only=True)
        optimizer_state = torch.load(folder / "optimizer.pt", map_location="cpu", weights_only=True)
        rng = torch.load(folder / "rng.pt", map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {folder} is incomplete or corrupt: {exc}") from exc
    return Checkpoint(
        step=int(state["step"]),
        policy_version=int(state["policy_version"]),
        finetune=str(state["finetune"]),
        weights=weights,
        optimizer_state=optimizer_state,
        rng_state=rng,
    )
