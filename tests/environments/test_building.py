"""Building environments: a failed build says what failed and leaves nothing in the cache; an
environment without a Python for the agent is refused; a built one is found again, not rebuilt."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import time

import pytest

from agentcore_rl_harness.environments import build, find_built, load_spec, require_built
from agentcore_rl_harness.environments.cli import main
from agentcore_rl_harness.errors import EnvironmentBuildError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCORE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "envs"


def test_an_environment_without_python_is_refused(tmp_path, cache):
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "os-release").write_text("ID=empty\n")
    with tarfile.open(tmp_path / "empty.tar", "w") as archive:
        archive.add(tree, arcname=".")
    (tmp_path / "env.yaml").write_text("name: empty\nrootfs: empty.tar\n")
    with pytest.raises(EnvironmentBuildError) as raised:
        build(load_spec(tmp_path / "env.yaml"))
    assert "has no /usr/bin/python3: the agent runs inside it" in str(raised.value)
    assert "install python3" in str(raised.value)
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []  # no half build
    with pytest.raises(EnvironmentBuildError, match="has no /usr/bin/python3"):  # a directory in place
        require_built(load_spec(tree))


def test_a_failed_debian_build_names_the_step_and_leaves_no_environment(tmp_path, cache):
    (tmp_path / "env.yaml").write_text(  # a mirror nothing listens on: fails at once, no download
        "name: broken\ndebian:\n  mirror: http://127.0.0.1:9/debian\n  packages: [junit4]\n")
    spec = load_spec(tmp_path / "env.yaml")
    with pytest.raises(EnvironmentBuildError) as raised:
        build(spec)
    message = str(raised.value)
    assert "mmdebstrap failed" in message and "http://127.0.0.1:9/debian is reachable" in message
    assert "--- last output ---" in message
    assert find_built(spec) is None and [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_an_unbuilt_environment_says_how_to_build_it(tmp_path, cache):
    (tmp_path / "env.yaml").write_text("name: later\ndebian: {packages: [junit4]}\n")
    with pytest.raises(EnvironmentBuildError) as raised:
        require_built(load_spec(tmp_path / "env.yaml"))
    assert f"agentcore-rl env build {tmp_path / 'env.yaml'}` once" in str(raised.value)


def test_the_built_java_environment_is_cached_and_reused(java_environment, capsys):
    manifest = json.loads((java_environment.root.parent / "manifest.json").read_text())
    assert manifest["hash"] == java_environment.spec.content_hash() and manifest["python"].startswith("3.11")
    assert manifest["size_bytes"] > 100e6 and manifest["build_s"] > 0
    assert (java_environment.root / "usr/share/java/junit4.jar").is_file()
    started = time.monotonic()
    assert main(["build", str(java_environment.spec.source)]) == 0  # cached: no rebuild
    assert time.monotonic() - started < 5
    out = capsys.readouterr().out
    assert f"migration-java: cached (built in {manifest['build_s']:.0f} s)" in out and str(java_environment.root) in out
    assert main(["list"]) == 0 and java_environment.root.parent.name in capsys.readouterr().out


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the cache and tmp_path on one filesystem: no bytes copied
    except OSError:
        shutil.copy2(source, target)


def test_a_root_whose_python_cannot_serve_the_agent_is_refused(java_environment, tmp_path):
    """The Debian root's own python3 and standard library, without the pip packages: the
    environment is refused at its first use, naming what the agent's server needs."""
    source, tree = java_environment.root, tmp_path / "bare"
    for part in ("usr/bin/python3.11", *(f"usr/lib/x86_64-linux-gnu/{lib}" for lib in
                 ("libc.so.6", "libm.so.6", "libz.so.1", "libexpat.so.1", "ld-linux-x86-64.so.2"))):
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(str((source / part).resolve()), str(tree / part))  # the library, not its link
    shutil.copytree(source / "usr/lib/python3.11", tree / "usr/lib/python3.11", symlinks=True,
                    copy_function=_link_or_copy)
    (tree / "usr/bin/python3").symlink_to("python3.11")
    (tree / "usr/lib64").mkdir()
    (tree / "usr/lib64/ld-linux-x86-64.so.2").symlink_to("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    for link in ("bin", "lib", "lib64"):
        (tree / link).symlink_to(f"usr/{link}")
    with pytest.raises(EnvironmentBuildError) as raised:
        require_built(load_spec(tree))  # a directory used in place: checked at its first use
    message = str(raised.value)
    assert "environment 'bare' lacks Python for the agent" in message
    assert "No module named 'bedrock_agentcore'" in message  # the import that failed, from its output
    assert "add `bedrock-agentcore` (and the agent's other packages) to the spec's `pip:` list" in message
