"""The package's import graph (every `import`, lazy ones inside functions too): no circles, and no
arrow running back up a layer. Read with `ast`, so it holds for imports that never ran."""

from __future__ import annotations

import ast
from pathlib import Path

import agentcore_rl_harness

PACKAGE = "agentcore_rl_harness"
ROOT = Path(agentcore_rl_harness.__file__).parent

# Bottom to top. A module may import its own layer or lower ones, never a higher one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "records", "conf", "heap", "interrupts"),
    ("config_schema",),
    ("tasks", "environments", "judged", "mcp_servers", "store", "train_store", "models", "agent", "cli_agents",
     "progress", "serving", "sanity_agents", "scaffold"),
    ("gateway",),
    ("samplers", "runtimes", "judges"),
    ("trainers", "tinker_server"),
    ("reports", "trackers", "viewer"),
    ("config",),
    ("run",),
    ("fixtures", "plugin", "pytest_outcomes", "sharding", "_shard_scheduling", "integrations", "sweep",
     "task_collection", "standalone_gateway", "cli", "config_reference", "run_options", "run_hooks"),
    ("",),  # the package's own __init__: the public facade
)


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, package)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (names relative to the package; "" is its root)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        here = [PACKAGE, *name.split(".")] if name else [PACKAGE]
        if not package:
            here = here[:-1]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:  # `from pkg import sub` imports the submodule pkg.sub
                    submodule = f"{module}.{alias.name}"
                    targets.add(submodule if _relative(submodule) in modules else module)
        graph[name] = {
            _relative(target) for target in targets
            if (target == PACKAGE or target.startswith(PACKAGE + ".")) and _relative(target) != name
            and _relative(target) in modules
        }
    return graph


def _relative(module: str) -> str:
    return module.removeprefix(PACKAGE).removeprefix(".")


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"module {module!r} is in no layer of tests/test_import_graph.py: add it")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    # run/compose.py imports the trainer registry only inside a function: it still counts.
    assert "trainers.registry" in graph["run.compose"]
    assert "records" in graph["gateway.sampling"]


def test_no_import_circle():
    assert cycles(import_graph()) == []


def test_no_arrow_runs_up_a_layer():
    upward = [
        f"{source} (layer {layer_of(source)}) -> {target} (layer {layer_of(target)})"
        for source, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if source and target and layer_of(target) > layer_of(source)
    ]
    assert upward == []


def test_nothing_imports_the_package_facade():
    assert [name for name, targets in import_graph().items() if "" in targets] == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
