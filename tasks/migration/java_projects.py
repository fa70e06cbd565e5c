"""The Java level's seeded generator, and its source checks.

A row is a small Maven-layout project (`src/main/java/...`, JUnit 4 tests under `src/test/java`,
a `run_tests.sh`) with one or two classes to migrate off an API deprecated or removed between
Java 8 and 17 (`java_templates.py`). Its fields follow the Python levels' (`targets`, `files`,
`migrated`, `test_counts`, `instruction`, MigrationBench's counts), with the test classes named
by their Java name.

The checks are pure functions over source text (comments and string literals blanked first):
no deprecated use of any kind, the kind's replacement in use, every public method kept.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from string import Template
from typing import Any

from java_templates import JAVA_KINDS, RUN_TESTS
from migration_projects import DOMAINS

LEVEL = "java"
ROWS = {"train": 10, "test": 10}

# kind -> (what is deprecated, as a regex over blanked source; the replacement that must appear)
DEPRECATED = {
    "boxing": r"\bnew\s+(Integer|Long|Double|Float|Short|Byte|Character|Boolean)\s*\(",
    "thread_stop": r"\.\s*(stop|suspend|resume)\s*\(\s*\)",
    "jaxb": r"\bjavax\s*\.\s*xml\s*\.\s*bind\b|\bDatatypeConverter\b",
    "finalizer": r"\bvoid\s+finalize\s*\(",
    "date": r"\bnew\s+Date\s*\(\s*[^)\s]|\.\s*(getYear|getMonth|getDate|getDay|setDate|setMonth|setYear)\s*\(",
}
REPLACEMENT = {
    "boxing": r"\b(Integer|Long|Double)\s*\.\s*valueOf\s*\(",
    "thread_stop": r"\.\s*interrupt\s*\(\s*\)",
    "jaxb": r"\bBase64\b",
    "finalizer": r"\bimplements\b[^{]*\b(AutoCloseable|Closeable)\b",
    "date": r"\bjava\s*\.\s*time\b",
}
_PUBLIC_METHOD = re.compile(r"\bpublic\s+(?:static\s+)?(?:synchronized\s+)?[\w<>\[\], ]+?\s+(\w+)\s*\(")
_BLANK = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(source: str) -> str:
    """`source` with comments and string/char literals blanked (line numbers kept)."""
    return _BLANK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


@dataclass(frozen=True)
class JavaFileCheck:
    path: str
    kind: str
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def check_java_file(path: str, kind: str, source: str | None, original: str) -> JavaFileCheck:
    """What is still wrong with the migrated `source` of `path` (kind `kind`)."""
    if source is None:
        return JavaFileCheck(path, kind, ("the file is missing or unreadable",))
    code = blank(source)
    problems = []
    for name, pattern in DEPRECATED.items():
        for match in re.finditer(pattern, code):
            line = code.count("\n", 0, match.start()) + 1
            problems.append(f"line {line}: {match.group(0).strip()} ({name}, deprecated)")
    if not re.search(REPLACEMENT[kind], code):
        problems.append(f"no use of the replacement ({JAVA_KINDS[kind].hint})")
    kept = set(_PUBLIC_METHOD.findall(code))
    lost = sorted(set(_PUBLIC_METHOD.findall(blank(original))) - kept)
    if lost:
        problems.append(f"public methods removed: {', '.join(lost)}")
    return JavaFileCheck(path, kind, tuple(problems))


def _params(rng: random.Random, domain: tuple[str, str, str]) -> dict[str, str]:
    a, b = rng.sample(range(2, 60), 2)
    factor = rng.randint(2, 9)
    label = f"{domain[1]}-{rng.randint(100, 999)}"
    high = rng.randint(128, 255)
    start = datetime.date(rng.randint(1995, 2030), rng.randint(1, 12), 1) + datetime.timedelta(days=rng.randint(0, 27))
    days = rng.randint(3, 40)
    return {
        "domain": domain[0], "noun": domain[1], "Noun": domain[1].capitalize(), "a": str(a), "b": str(b),
        "factor": str(factor), "af": str(a * factor), "bf": str(b * factor), "label": label,
        "b64": base64.b64encode(label.encode()).decode(), "hb": str(high),
        "hex": f"{a:02X}{high:02X}", "year": str(start.year), "month": str(start.month),
        "day": str(start.day), "days": str(days), "start": start.isoformat(),
        "shifted": (start + datetime.timedelta(days=days)).isoformat(),
        "weekday": str(start.isoweekday()),
    }


def instruction(targets: list[dict[str, str]]) -> str:
    lines = [f"- {t['path']}: {JAVA_KINDS[t['kind']].hint}" for t in targets]
    return (
        "This Java project (Java 17, JUnit 4) uses APIs deprecated or removed since Java 8. Migrate "
        "each file below, keeping its behaviour and its public methods:\n" + "\n".join(lines) + "\n"
        "Do not edit the tests. Check your work with `sh run_tests.sh`, then say which files you "
        "changed."
    )


def make_row(rng: random.Random, *, kinds: tuple[str, ...], split: str, index: int) -> dict[str, Any]:
    domain = DOMAINS[rng.randrange(len(DOMAINS))]
    params = _params(rng, domain)
    package = f"com/example/{domain[0]}"
    files: dict[str, str] = {}
    migrated: dict[str, str] = {}
    test_counts: dict[str, int] = {}
    targets = []
    for name in kinds:
        kind = JAVA_KINDS[name]
        cls = Template(kind.cls).substitute(params)
        path = f"src/main/java/{package}/{cls}.java"
        files[path] = Template(kind.old).substitute(params)
        migrated[path] = Template(kind.new).substitute(params)
        files[f"src/test/java/{package}/{cls}Test.java"] = Template(kind.tests).substitute(params)
        test_counts[f"com.example.{domain[0]}.{cls}Test"] = kind.test_count
        targets.append({"path": path, "kind": name})
    files["run_tests.sh"] = RUN_TESTS.replace("$TESTS", " ".join(test_counts))
    files = dict(sorted(files.items()))
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {
        "id": f"migration-java-{split}-{index:02d}", "split": split, "level": LEVEL,
        "repo": f"generated/{domain[0]}-java-{split}-{index:02d}", "base_commit": digest[:40],
        "num_files": len(files), "num_test_files": len(test_counts),
        "num_test_cases": sum(test_counts.values()),
        "num_loc": sum(text.count("\n") for text in files.values()),
        "targets": targets, "files": files, "migrated": migrated, "test_counts": test_counts,
        "instruction": instruction(targets), "language": "java",
    }


def make_java_rows(seed: int = 0) -> list[dict[str, Any]]:
    """The Java level's rows: one or two classes to migrate, the kinds and their pairs cycled."""
    rng = random.Random(seed)
    combos = [(kind,) for kind in sorted(JAVA_KINDS)] + list(itertools.combinations(sorted(JAVA_KINDS), 2))
    rng.shuffle(combos)
    cycle = itertools.cycle(combos)
    return [make_row(rng, kinds=next(cycle), split=split, index=index)
            for split, count in ROWS.items() for index in range(count)]
