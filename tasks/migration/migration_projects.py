"""The seeded generator of the migration pack: small Python projects that use deprecated APIs.

Rows follow MigrationBench's shape (`repo`, `base_commit`, `num_*` counts, a `split`) with what a
CPU-sized pack needs beside them: the project's files, the files to migrate and their kinds,
the reference migration, and each test module's test count. The level is the number of files to
change (1-3); a project has 2-6 files, each changed module with its own unittest module.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import Any

from migration_templates import HELPER, HELPER_TESTS, KINDS, render

LEVELS = (1, 2, 3)
ROWS_PER_LEVEL = {"train": 14, "test": 10}
PROJECT_DIR = "project"  # where the agent lays the project out in its session's directory

DOMAINS = [
    ("inventory", "item", "sku"), ("ledger", "entry", "account"), ("roster", "member", "team"),
    ("catalog", "book", "shelf"), ("fleet", "truck", "depot"), ("garden", "plant", "bed"),
    ("kitchen", "recipe", "course"), ("studio", "track", "album"), ("clinic", "visit", "ward"),
    ("harbor", "vessel", "berth"),
]
NAMES = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "sierra", "tango", "zulu"]
OPTIONS = ["limit", "count", "top", "width", "batch"]


def _params(rng: random.Random, domain: tuple[str, str, str]) -> dict[str, str]:
    name1, name2 = rng.sample(NAMES, 2)
    a, b, c = rng.sample(range(2, 40), 3)
    return {
        "domain": domain[0], "Domain": domain[0].capitalize(), "noun": domain[1], "key": domain[2],
        "opt": rng.choice(OPTIONS), "default": str(rng.randint(3, 20)), "number": str(rng.randint(21, 99)),
        "name1": name1, "name2": name2, "Name1": name1.capitalize(), "prefix": name2[:2],
        "a": str(a), "b": str(b), "c": str(c), "factor": str(rng.randint(2, 9)),
        "past": str(rng.randint(5, 120)), "ttl": str(rng.randint(600, 7200)),
        "epoch": str(rng.randint(0, 2_000_000_000)), "label": domain[1],
        "plugin": f"{domain[1]}_plugin", "value": str(rng.randint(2, 9)),
    }


def instruction(targets: list[dict[str, str]]) -> str:
    lines = [f"- {t['path']}: {KINDS[t['kind']].hint}" for t in targets]
    return (
        "This Python project uses deprecated APIs. Migrate each file below to the documented "
        "replacement, keeping its behaviour and its public functions:\n" + "\n".join(lines) + "\n"
        "Do not edit the tests. Check your work with `python -m unittest`, then say which files "
        "you changed."
    )


def make_row(rng: random.Random, *, level: int, kinds: tuple[str, ...], split: str, index: int) -> dict:
    domain = DOMAINS[rng.randrange(len(DOMAINS))]
    params = _params(rng, domain)
    files: dict[str, str] = {}
    migrated: dict[str, str] = {}
    test_counts: dict[str, int] = {}
    targets = []
    for name in kinds:
        kind = KINDS[name]
        path = f"{kind.module}.py"
        files[path] = render(kind.old, params)
        migrated[path] = render(kind.new, params)
        files[f"test_{kind.module}.py"] = render(kind.tests, params)
        test_counts[f"test_{kind.module}"] = kind.test_count
        targets.append({"path": path, "kind": name})
    if level < 3:  # a module that needs no change (and its tests) rounds the project out
        files[f"{domain[0]}.py"] = render(HELPER, params)
        if rng.random() < 0.5:
            files[f"test_{domain[0]}.py"] = render(HELPER_TESTS, params)
            test_counts[f"test_{domain[0]}"] = 2
    files = dict(sorted(files.items()))
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {
        "id": f"migration-l{level}-{split}-{index:02d}",
        "split": split,
        "level": level,
        "repo": f"generated/{domain[0]}-{level}-{split}-{index:02d}",
        "base_commit": digest[:40],
        "num_files": len(files),
        "num_test_files": len(test_counts),
        "num_test_cases": sum(test_counts.values()),
        "num_loc": sum(text.count("\n") for text in files.values()),
        "targets": targets,
        "files": files,
        "migrated": migrated,
        "test_counts": test_counts,
        "instruction": instruction(targets),
    }


def make_rows(seed: int = 0) -> list[dict[str, Any]]:
    """Every row of the pack: per level, ROWS_PER_LEVEL rows per split, kinds cycled evenly."""
    rng = random.Random(seed)
    rows = []
    for level in LEVELS:
        combos = list(itertools.combinations(sorted(KINDS), level))
        rng.shuffle(combos)
        cycle = itertools.cycle(combos)
        for split, count in ROWS_PER_LEVEL.items():
            for index in range(count):
                kinds = next(cycle)
                rows.append(make_row(rng, level=level, kinds=kinds, split=split, index=index))
    return rows
