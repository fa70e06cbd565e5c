"""`agentcore-rl init DIR`: a task project to start from (agent, task, rows, rewards, oracle,
config, README) that passes `agent=oracle` at 100% and evaluates with `model=tiny` as made.

The files are package data under `files/` (`*.tmpl`, so neither pytest nor the import checks
see them as modules); `agents/<framework>.py.tmpl` becomes `agent.py`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ..errors import HarnessError

FILES = Path(__file__).parent / "files"


@dataclass(frozen=True)
class Framework:
    """One way to write the agent: what it says in the README and which packages it imports."""

    text: str
    modules: tuple[str, ...]
    pip: str


FRAMEWORKS = {
    "openai": Framework("the plain OpenAI SDK", ("openai",), "openai"),
    "langgraph": Framework("LangGraph over langchain-openai's ChatOpenAI",
                           ("langgraph", "langchain_openai"), "langgraph langchain-openai"),
    "strands": Framework("Strands Agents with its OpenAIModel", ("strands",), "'strands-agents[openai]'"),
}
DEFAULT_FRAMEWORK = "openai"
# template (under files/) -> path in the new project
LAYOUT = {
    "test_task.py.tmpl": "test_task.py",
    "shop_tools.py.tmpl": "shop_tools.py",
    "data/orders.jsonl.tmpl": "data/orders.jsonl",
    "configs/config.yaml.tmpl": "configs/config.yaml",
    "pytest.ini.tmpl": "pytest.ini",
    "gitignore.tmpl": ".gitignore",
    "README.md.tmpl": "README.md",
}


def init_project(directory: Path, *, framework: str = DEFAULT_FRAMEWORK, force: bool = False) -> list[Path]:
    """Write a new task project into `directory`; the paths written, in order.

    A directory that exists and holds anything is refused unless `force` (then the project's
    files are written over what is there, and nothing else is touched)."""
    if framework not in FRAMEWORKS:
        raise HarnessError(f"--framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    if directory.exists() and not directory.is_dir():
        raise HarnessError(f"{directory} exists and is not a directory; give a new or empty directory")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        entries = sorted(entry.name for entry in directory.iterdir())
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise HarnessError(f"{directory} is not empty ({shown}); give a new or empty directory, "
                           "or --force to write the project's files over it")
    info = FRAMEWORKS[framework]
    layout = {f"agents/{framework}.py.tmpl": "agent.py", **LAYOUT}
    written = []
    for template, target in layout.items():
        text = (FILES / template).read_text(encoding="utf-8")
        if target == "README.md":
            text = (text.replace("{name}", directory.resolve().name).replace("{framework_text}", info.text)
                    .replace("{framework}", framework))
        path = directory / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def missing_modules(framework: str) -> list[str]:
    """The framework's packages this Python cannot import (the agent would fail to start)."""
    return [name for name in FRAMEWORKS[framework].modules if importlib.util.find_spec(name) is None]
