"""`agentcore-rl init`: the project it makes passes `agent=oracle` at 100% and evaluates with
`model=tiny` as made, for each framework; a non-empty directory is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from agentcore_rl_harness.scaffold import FILES, FRAMEWORKS

CLI = [sys.executable, "-m", "agentcore_rl_harness.cli"]
ROOT = Path(__file__).resolve().parents[1]


def _init(directory, *args):
    return subprocess.run([*CLI, "init", str(directory), *args], capture_output=True, text=True, timeout=120)


def _pytest(project, *sets, timeout=420):
    command = [sys.executable, "-m", "pytest", "--agentcore-rl", "eval", "-p", "no:cacheprovider"]
    for override in ("model=tiny", *sets):
        command += ["--agentcore-rl-set", override]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=timeout)


def _report(project):
    (run_dir,) = sorted((project / "outputs").iterdir())  # the one run in outputs/
    return json.loads((run_dir / "report.json").read_text())


def test_init_writes_the_project_and_says_what_next(tmp_path):
    out = _init(tmp_path / "shop")
    assert out.returncode == 0, out.stderr
    for name in ("agent.py", "test_task.py", "shop_tools.py", "data/orders.jsonl", "configs/config.yaml",
                 "pytest.ini", "README.md"):
        assert (tmp_path / "shop" / name).is_file(), name
    rows = [json.loads(line) for line in (tmp_path / "shop" / "data/orders.jsonl").read_text().splitlines()]
    assert {row["split"] for row in rows} == {"train", "test"} and len({row["id"] for row in rows}) == len(rows)
    assert "from openai import OpenAI" in (tmp_path / "shop" / "agent.py").read_text()
    assert "--agentcore-rl-set agent=oracle" in out.stdout


def test_init_refuses_a_non_empty_directory_unless_forced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    refused = _init(tmp_path)
    assert refused.returncode == 2
    assert f"{tmp_path} is not empty (notes.txt)" in refused.stderr and "--force" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing written
    forced = _init(tmp_path, "--force", "--framework", "strands")
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert "from strands.models.openai import OpenAIModel" in (tmp_path / "agent.py").read_text()


def test_init_refuses_a_file_and_an_unknown_framework(tmp_path):
    (tmp_path / "file").write_text("")
    out = _init(tmp_path / "file")
    assert out.returncode == 2 and "exists and is not a directory" in out.stderr
    out = _init(tmp_path / "new", "--framework", "crewai")
    assert out.returncode == 2 and "invalid choice: 'crewai'" in out.stderr


def test_every_template_is_package_data():
    """An installed wheel carries what `init` reads: each template matches a package-data glob."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "agentcore_rl_harness"]
    package = FILES.parents[1]
    templates = [path.relative_to(package).as_posix() for path in FILES.rglob("*") if path.is_file()]
    assert templates and all(path.endswith(".tmpl") for path in templates)
    assert [path for path in templates if not any(fnmatch(path, glob) and path.count("/") == glob.count("/")
                                                  for glob in globs)] == []
    assert {path.stem for path in (FILES / "agents").glob("*.tmpl")} == {f"{name}.py" for name in FRAMEWORKS}


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_new_project_passes_its_oracle_and_evaluates_with_tiny(tmp_path, tiny_model_dir, framework):
    project = tmp_path / "shop"
    assert _init(project, "--framework", framework).returncode == 0
    oracle = _pytest(project, "agent=oracle")
    assert oracle.returncode == 0, oracle.stdout[-3000:] + oracle.stderr[-3000:]
    assert "100.0% success" in oracle.stdout
    report = _report(project)
    assert report["overall"]["success_rate"]["value"] == 1.0 and report["overall"]["rollouts"] == 8
    for output in (oracle.stdout, oracle.stderr):
        assert "DeprecationWarning" not in output and "is unset" not in output  # pytest-asyncio's
    for run_dir in (project / "outputs").iterdir():
        run_dir.rename(tmp_path / run_dir.name)
    tiny = _pytest(project, "eval.samples=1")  # each of the 4 test rows once: 8 rollouts is the oracle's check
    assert tiny.returncode == 0, tiny.stdout[-3000:] + tiny.stderr[-3000:]
    report = _report(project)
    assert report["overall"]["rollouts"] == 4
    # the tiny model's noise is a wrong answer, never a crash of the agent or the harness
    assert report["overall"]["failures"].get("infra_error", 0) == report["overall"]["failures"].get("agent_error", 0) == 0
    assert "DeprecationWarning" not in tiny.stdout + tiny.stderr
