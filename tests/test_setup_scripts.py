"""scripts/_python.sh: which Python the set-up installs into, for each kind of fresh machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pick(root: Path, **env: str) -> subprocess.CompletedProcess:
    """Run pick_python for a project at `root`; prints the chosen interpreter on the last line."""
    script = f'source "{ROOT}/scripts/_python.sh" && pick_python "{root}" && echo "PY=$PY"'
    clean = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHON", "CONDA_PREFIX")}
    return subprocess.run(["bash", "-c", script], env={**clean, **env}, capture_output=True, text=True, timeout=120)


def chosen(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1].removeprefix("PY=")


def make_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(path)
    return path


def test_an_active_virtual_environment_is_used(tmp_path):
    active = make_venv(tmp_path / "mine")
    result = pick(tmp_path / "project", VIRTUAL_ENV=str(active))
    assert chosen(result) == str(active / "bin" / "python")
    assert "active virtual environment" in result.stdout
    assert not (tmp_path / "project" / ".venv").exists()


def test_a_venv_interpreter_given_as_python_is_used_as_is(tmp_path):
    """A venv's python (not activated) is writable and not externally managed: used directly."""
    other = make_venv(tmp_path / "other")
    result = pick(tmp_path / "project", PYTHON=str(other / "bin" / "python"))
    assert chosen(result) == str(other / "bin" / "python")
    assert not (tmp_path / "project" / ".venv").exists()


def test_an_earlier_project_venv_is_reused(tmp_path):
    project = tmp_path / "project"
    make_venv(project / ".venv")
    result = pick(project, PYTHON=sys.executable)
    assert chosen(result) == str(project / ".venv" / "bin" / "python")


def _externally_managed_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/bin/python3.11"):
        stdlib = subprocess.run([candidate, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                                capture_output=True, text=True).stdout.strip() if Path(candidate).exists() else ""
        if stdlib and (Path(stdlib) / "EXTERNALLY-MANAGED").exists():
            return candidate
    message = "no PEP 668 (externally-managed) Python on this machine (Debian's /usr/bin/python3 has one)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def test_an_externally_managed_python_gets_a_project_venv_and_says_so(tmp_path):
    base = _externally_managed_python()
    project = tmp_path / "project"
    project.mkdir()
    result = pick(project, PYTHON=base)
    assert chosen(result) == str(project / ".venv" / "bin" / "python")
    assert "externally-managed (PEP 668)" in result.stdout and ". .venv/bin/activate" in result.stdout
    made = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                          capture_output=True, text=True)
    assert made.stdout.strip() == "True"


def test_a_writable_system_python_is_used_in_place(tmp_path):
    """This machine's base interpreter is writable and not externally managed (pyenv-style)."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    purelib = subprocess.run([str(base), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True).stdout.strip()
    stdlib = sysconfig.get_path("stdlib")
    if not os.access(purelib, os.W_OK) or (Path(stdlib) / "EXTERNALLY-MANAGED").exists():
        pytest.skip(f"{base} is not a writable, unmanaged install here")
    result = pick(tmp_path / "project", PYTHON=str(base))
    assert chosen(result) == shutil.which(str(base))
    assert not (tmp_path / "project" / ".venv").exists()


def test_a_missing_interpreter_is_a_clear_error(tmp_path):
    result = pick(tmp_path / "project", PYTHON="python-does-not-exist")
    assert result.returncode != 0
    assert "no 'python-does-not-exist' on PATH" in result.stderr


def test_setup_refuses_an_unknown_profile():
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup"), "everything"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: bash scripts/setup [main|test]" in result.stderr


def test_use_python_puts_the_project_venv_first_on_path(tmp_path):
    """scripts/test and scripts/main-job run the project's console scripts (agentcore-rl) from the
    set-up's .venv even though no venv is activated in their shell."""
    project = tmp_path / "project"
    make_venv(project / ".venv")
    script = f'source "{ROOT}/scripts/_python.sh" && use_python "{project}" && command -v python && echo "PY=$PY"'
    clean = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHON", "CONDA_PREFIX")}
    result = subprocess.run(["bash", "-c", script], env=clean, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    first, last = result.stdout.strip().splitlines()[-2:]
    assert first == str(project / ".venv" / "bin" / "python")
    assert last == f"PY={project / '.venv' / 'bin' / 'python'}"
    assert "installing into" not in result.stdout  # quiet: the set-up already said where
