"""The training files of a run directory: `train/steps.jsonl` and `checkpoints/step-NNNNN`.

Written by the training loop, read by reports and by a resumed run; below both in the layers.
One step numbering everywhere: steps count from 1, so step N's line in steps.jsonl has
`"step": N`, its train rollouts have `step` N, the terminal says `train step N/M`, and the
checkpoint saved after it is `checkpoints/step-0000N` (a checkpoint's number is the steps done).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STEPS_FILE = "steps.jsonl"


def steps_path(run_dir: Path) -> Path:
    return Path(run_dir) / "train" / STEPS_FILE


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    path = steps_path(run_dir)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def append_step(run_dir: Path, line: dict[str, Any]) -> None:
    path = steps_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def rewrite_steps(run_dir: Path, *, done: int) -> None:
    """Drop the lines of steps after step `done` (a resumed run redoes those steps)."""
    path = steps_path(run_dir)
    if path.is_file():
        kept = [line for line in read_steps(run_dir) if line["step"] <= done]
        path.write_text("".join(json.dumps(line) + "\n" for line in kept), encoding="utf-8")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:05d}"


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    """(step, path) of the newest complete checkpoint (`checkpoints/step-NNNNN`), if any."""
    folder = Path(run_dir) / "checkpoints"
    found = []
    for path in folder.glob("step-*") if folder.is_dir() else ():
        suffix = path.name.removeprefix("step-")
        if suffix.isdigit() and path.is_dir():
            found.append((int(suffix), path))
    return max(found) if found else None
