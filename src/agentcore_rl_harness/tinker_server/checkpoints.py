"""`tinker://<model_id>/<weights|sampler_weights>/<name>` paths and their local directories.

A checkpoint directory holds `meta.json` (base model, LoRA config, step), `weights.pt` (the
trainable tensors by parameter name) and, for `weights` (save_state), `optimizer.pt`.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import BadRequest, NotFound

KINDS = ("weights", "sampler_weights")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class LoraSpec:
    """The LoRA shape of a training model (Tinker's `LoraConfig`)."""

    rank: int
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True


@dataclass(frozen=True)
class CheckpointPath:
    model_id: str
    kind: str
    name: str

    @property
    def uri(self) -> str:
        return f"tinker://{self.model_id}/{self.kind}/{self.name}"

    @classmethod
    def parse(cls, uri: str) -> "CheckpointPath":
        parts = uri[len("tinker://"):].split("/") if uri.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in KINDS or not _NAME.match(parts[2]) or not parts[0]:
            raise BadRequest(
                f"{uri!r} is not a checkpoint path of this server; expected "
                "tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>"
            )
        return cls(parts[0], parts[1], parts[2])


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise BadRequest(f"checkpoint name {name!r} must match {_NAME.pattern} (no slashes or '..')")
    return name


class CheckpointStore:
    """Checkpoint directories under one root; `model_id` colons become `_` on disk."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def directory(self, path: CheckpointPath) -> Path:
        safe_model = re.sub(r"[^A-Za-z0-9._-]", "_", path.model_id)
        return self.root / safe_model / path.kind / path.name

    def save(self, path: CheckpointPath, *, base_model: str, lora: LoraSpec, step: int,
             weights: dict[str, Any], optimizer_state: dict[str, Any] | None, overwrite: bool = True) -> None:
        target = self.directory(path)
        if target.exists():
            if not overwrite:
                raise BadRequest(f"checkpoint {path.uri} exists; pass overwrite=True or pick another name")
            shutil.rmtree(target)
        building = target.with_name(target.name + ".partial")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        torch.save({name: tensor.detach().cpu() for name, tensor in weights.items()}, building / "weights.pt")
        if optimizer_state is not None:
            torch.save(optimizer_state, building / "optimizer.pt")
        meta = {"uri": path.uri, "base_model": base_model, "lora": asdict(lora), "step": step}
        (building / "meta.json").write_text(json.dumps(meta, indent=2))
        building.rename(target)

    def meta(self, path: CheckpointPath) -> dict[str, Any]:
        meta_file = self.directory(path) / "meta.json"
        if not meta_file.is_file():
            raise NotFound(f"no checkpoint at {path.uri} (looked in {meta_file.parent})")
        return json.loads(meta_file.read_text())

    def lora(self, path: CheckpointPath) -> LoraSpec:
        return LoraSpec(**self.meta(path)["lora"])

    def weights(self, path: CheckpointPath) -> dict[str, Any]:
        self.meta(path)
        return torch.load(self.directory(path) / "weights.pt", weights_only=True)

    def optimizer_state(self, path: CheckpointPath) -> dict[str, Any]:
        file = self.directory(path) / "optimizer.pt"
        if not file.is_file():
            raise BadRequest(f"checkpoint {path.uri} has no optimizer state; save it with save_state")
        return torch.load(file, weights_only=True)
