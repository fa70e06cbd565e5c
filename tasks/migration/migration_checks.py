"""What the migration pack's reward checks: deprecated uses found by AST, the documented
replacement in use, and the public functions kept.

Pure functions over source text; `migration_rewards.py` runs them on the files a session left.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

TYPING_ALIASES = frozenset({
    "List", "Dict", "Tuple", "Set", "FrozenSet", "Type", "Deque", "DefaultDict", "OrderedDict",
    "Counter", "ChainMap", "Optional", "Union", "Text",
})
DEPRECATED_MODULES = {"optparse": "optparse", "imp": "imp"}
# Import of the replacement module each kind's migration must use (None: nothing to import).
REPLACEMENT_MODULES = {"optparse": "argparse", "imp": "importlib"}


@dataclass(frozen=True)
class Use:
    """One deprecated use: its kind, line, and what was written."""

    kind: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} ({self.kind})"


def _imported_modules(tree: ast.AST) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _called_name(node) in (
                    "__import__", "import_module"):
            found.append((node.args[0].value, node.lineno))
    return found


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _top(module: str) -> str:
    return module.split(".")[0]


def deprecated_uses(tree: ast.AST) -> list[Use]:
    """Every use of the pack's deprecated APIs in `tree`, whatever file it is in."""
    uses = [Use(DEPRECATED_MODULES[_top(module)], line, f"import {module}")
            for module, line in _imported_modules(tree) if _top(module) in DEPRECATED_MODULES]
    typing_modules = {"typing"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            typing_modules |= {alias.asname for alias in node.names if alias.name == "typing" and alias.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            uses += [Use("typing_aliases", node.lineno, f"from typing import {alias.name}")
                     for alias in node.names if alias.name in TYPING_ALIASES]
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            uses += [Use("get_event_loop", node.lineno, "from asyncio import get_event_loop")
                     for alias in node.names if alias.name == "get_event_loop"]
        elif isinstance(node, ast.Attribute):
            if node.attr in ("utcnow", "utcfromtimestamp"):
                uses.append(Use("utcnow", node.lineno, f".{node.attr}"))
            elif node.attr == "get_event_loop":
                uses.append(Use("get_event_loop", node.lineno, ".get_event_loop"))
            elif node.attr in TYPING_ALIASES and isinstance(node.value, ast.Name) \
                    and node.value.id in typing_modules:
                uses.append(Use("typing_aliases", node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Call) and _called_name(node) == "getattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) \
                and node.args[1].value in ("utcnow", "utcfromtimestamp", "get_event_loop"):
            kind = "get_event_loop" if node.args[1].value == "get_event_loop" else "utcnow"
            uses.append(Use(kind, node.lineno, f"getattr(..., {node.args[1].value!r})"))
    return sorted(uses, key=lambda use: (use.line, use.kind))


def uses_replacement(kind: str, tree: ast.AST) -> bool:
    """Whether `tree` uses the documented replacement of `kind` (typing needs none)."""
    if kind in REPLACEMENT_MODULES:
        return any(_top(module) == REPLACEMENT_MODULES[kind] for module, _ in _imported_modules(tree))
    if kind == "utcnow":
        return any(
            (isinstance(node, ast.Attribute) and node.attr == "utc")
            or (isinstance(node, ast.Attribute) and node.attr == "UTC")
            or (isinstance(node, ast.ImportFrom) and node.module == "datetime"
                and any(alias.name in ("UTC", "timezone") for alias in node.names))
            for node in ast.walk(tree)
        )
    if kind == "get_event_loop":
        return any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "asyncio"
            for node in ast.walk(tree)
        ) or any(isinstance(node, ast.ImportFrom) and node.module == "asyncio"
                 and any(alias.name == "run" for alias in node.names) for node in ast.walk(tree))
    return True


def public_names(tree: ast.AST) -> set[str]:
    """Top-level functions and classes not starting with `_`."""
    body = tree.body if isinstance(tree, ast.Module) else []
    return {node.name for node in body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")}


def parse(source: str) -> ast.Module | None:
    """The module's tree, or None if it is not valid Python (or too deep to parse)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@dataclass(frozen=True)
class FileCheck:
    """The static verdict on one migrated file (its tests are run separately)."""

    path: str
    kind: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_file(path: str, kind: str, source: str | None, original: str) -> FileCheck:
    """A migrated file passes when it parses, holds no deprecated use of any kind, uses its
    kind's replacement, and still defines the original's public functions."""
    if source is None:
        return FileCheck(path, kind, ("the file is missing",))
    tree = parse(source)
    if tree is None:
        return FileCheck(path, kind, ("the file is not valid Python",))
    problems = [f"deprecated use left: {use}" for use in deprecated_uses(tree)]
    if not uses_replacement(kind, tree):
        problems.append(f"does not use the replacement for {kind}")
    lost = sorted(public_names(ast.parse(original)) - public_names(tree))
    if lost:
        problems.append(f"public functions removed: {', '.join(lost)}")
    return FileCheck(path, kind, tuple(problems))
