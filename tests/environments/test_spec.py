"""Reading environment specs: the two sources, what is added, the content hash, every mistake
named with the fix."""

from __future__ import annotations

import tarfile

import pytest

from agentcore_rl_harness.environments.spec import load_spec
from agentcore_rl_harness.errors import EnvironmentBuildError


def write(tmp_path, text, name="env.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_debian_spec_adds_python_and_what_pip_needs(tmp_path):
    spec = load_spec(write(tmp_path, "name: java\ndebian:\n  packages: [default-jdk-headless]\n"
                                     "pip: [bedrock-agentcore==1.25.0]\nenv:\n  A: b c\n"))
    assert spec.from_debian and spec.suite == "bookworm" and spec.mirror == "http://deb.debian.org/debian"
    assert spec.packages() == ("python3", "python3-pip", "ca-certificates", "default-jdk-headless")
    assert spec.env == (("A", "b c"),) and spec.pip == ("bedrock-agentcore==1.25.0",)
    assert spec.key().startswith("java-") and len(spec.key()) == len("java-") + 16


def test_the_content_hash_follows_what_the_build_depends_on(tmp_path):
    base = "name: e\ndebian:\n  packages: [junit4]\n"
    one = load_spec(write(tmp_path, base + "env:\n  X: '1'\n", "a.yaml"))
    same = load_spec(write(tmp_path, base + "env:\n  X: '2'\n", "b.yaml"))  # env is not built in
    other = load_spec(write(tmp_path, "name: e\ndebian:\n  packages: [junit4, maven]\n", "c.yaml"))
    pinned = load_spec(write(tmp_path, base + "pip: [openai==3.63.0]\n", "d.yaml"))
    assert one.content_hash() == same.content_hash()
    assert len({one.content_hash(), other.content_hash(), pinned.content_hash()}) == 3


def test_a_rootfs_directory_or_tarball(tmp_path):
    rootfs = tmp_path / "my-root"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    direct = load_spec(rootfs)
    assert direct.rootfs == rootfs and direct.in_place and direct.name == "my-root"
    tarball = tmp_path / "image.tar"
    with tarfile.open(tarball, "w") as archive:
        archive.add(rootfs, arcname=".")
    spec = load_spec(write(tmp_path, "name: img\nrootfs: image.tar\npip: [openai]\n"))
    assert spec.rootfs == tarball and not spec.in_place and not spec.from_debian
    before = spec.content_hash()
    tarball.write_bytes(tarball.read_bytes() + b"\0" * 512)
    assert load_spec(spec.source).content_hash() != before  # the tarball's bytes are hashed


@pytest.mark.parametrize("text, says", [
    ("name: e\n", "exactly one of `debian:`"),
    ("name: e\ndebian: {packages: [a]}\nrootfs: x\n", "exactly one of `debian:`"),
    ("name: e\ndebian: {packages: [a]}\nimage: x\n", "unknown key(s) ['image']"),
    ("name: E!\ndebian: {packages: [junit4]}\n", "must be lower-case"),
    ("name: e\ndebian: {packages: ['rm -rf']}\n", "are not Debian package names"),
    ("name: e\ndebian: {packages: junit4}\n", "`debian.packages` must be a list of strings"),
    ("name: e\ndebian: {pkgs: [junit4]}\n", "`debian` must be a mapping with keys"),
    ("name: e\nrootfs: missing.tar\n", "is neither a directory nor a tarball"),
    ("name: e\ndebian: {packages: [a]}\nenv: [A]\n", "`env` must be a mapping"),
    ("- a\n", "must be a mapping"),
    ("name: [\n", "is not valid YAML"),
])
def test_mistakes_are_named(tmp_path, text, says):
    with pytest.raises(EnvironmentBuildError, match=None) as raised:
        load_spec(write(tmp_path, text))
    assert says in str(raised.value) and "env.yaml" in str(raised.value)


def test_a_missing_path_or_an_unknown_file_type(tmp_path):
    with pytest.raises(EnvironmentBuildError, match="does not exist; give a spec file"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(EnvironmentBuildError, match=r"unsupported file type '\.txt'"):
        load_spec(write(tmp_path, "x", "env.txt"))
