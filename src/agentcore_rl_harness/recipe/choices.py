"""A recipe's choices, each with its reason: printed when made, kept in RUN_DIR/recipe.json."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECIPE_FILE = "recipe.json"


@dataclass(frozen=True)
class Choice:
    """One choice of `recipe=auto`.

    `applied` is False when the choice was made but an explicit config key kept its own value
    (the line then says so), or when the choice was to change nothing."""

    key: str  # the config key it sets, e.g. trainer.autocast_dtype, or `warmup` for the warm-up
    value: Any  # the value chosen (JSON-able)
    reason: str  # what was observed, with its numbers
    applied: bool = True
    at: str = "start-up"  # start-up | warm-up | step N

    def line(self) -> str:
        verb = "=" if self.applied else "stays"
        return f"agentcore-rl recipe ({self.at}): {self.key} {verb} {self.value!r}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class RecipeLog:
    """Every choice of one run, in order. `write` prints; `save` rewrites recipe.json once the
    run directory exists (choices made before it do not wait for it to be written)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.choices: list[Choice] = []
        self.observations: dict[str, Any] = {}  # numbers behind the choices (benchmarks, probes)
        self.explicit: frozenset[str] = frozenset()  # the keys the user set (`explicit.py`)

    @classmethod
    def reopened(cls, run_dir: Path, write: Callable[[str], None]) -> "RecipeLog":
        """A resumed run's log: the choices recipe.json recorded (none where it has no file), so
        a choice made now is added to them, not written over them."""
        log = cls(write)
        recorded = read_recipe(run_dir) or {}
        log.choices = [Choice(**choice) for choice in recorded.get("choices", [])]
        log.observations = dict(recorded.get("observations", {}))
        log.explicit = frozenset(recorded.get("explicit_keys", []))
        return log

    def add(self, choice: Choice) -> Choice:
        self.choices.append(choice)
        self.write(choice.line())
        return choice

    def to_json(self) -> dict[str, Any]:
        return {"recipe": "auto", "choices": [c.to_json() for c in self.choices],
                "observations": self.observations, "explicit_keys": sorted(self.explicit)}

    def save(self, run_dir: Path) -> None:
        if run_dir.is_dir():
            (run_dir / RECIPE_FILE).write_text(json.dumps(self.to_json(), indent=2) + "\n")


def read_recipe(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/recipe.json, or None where the run chose nothing (recipe=none, eval mode)."""
    path = run_dir / RECIPE_FILE
    return json.loads(path.read_text()) if path.is_file() else None
