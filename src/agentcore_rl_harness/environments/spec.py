"""What an environment is made of, read from its spec file, and the content hash it is cached by.

An environment is a root filesystem a task's sessions run in (mounted read-only as their `/`).
It comes from one of two sources:

- `debian:` packages installed with `mmdebstrap` from a Debian mirror (python3 is always added);
- `rootfs:` a directory used as it is, or a tarball (an exported OCI image's filesystem,
  `docker export`) extracted into the cache;

plus `pip:` packages installed at build time with the environment's own python3 from PyPI (the
agent's dependencies: `bedrock-agentcore` at least), and `env:` variables its sessions get.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EnvironmentBuildError

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILDER_VERSION = 1  # bump when a build would come out differently for the same spec
_KEYS = {"name", "debian", "rootfs", "pip", "env"}
_DEBIAN_KEYS = {"suite", "mirror", "packages"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")


@dataclass(frozen=True)
class EnvironmentSpec:
    """One environment: where its filesystem comes from, what pip adds, what its sessions see."""

    name: str
    source: Path  # the spec file (or the rootfs named directly)
    debian_packages: tuple[str, ...] = ()
    suite: str = DEFAULT_SUITE
    mirror: str = DEFAULT_MIRROR
    rootfs: Path | None = None  # a directory or a tarball (instead of debian)
    pip: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    @property
    def from_debian(self) -> bool:
        return self.rootfs is None

    @property
    def in_place(self) -> bool:
        """A rootfs directory with nothing to add is used where it is (not copied, not cached)."""
        return self.rootfs is not None and self.rootfs.is_dir() and not self.pip

    def packages(self) -> tuple[str, ...]:
        """The Debian packages mmdebstrap installs: the spec's plus python3 (and pip's needs)."""
        implied = ["python3"] + (["python3-pip", "ca-certificates"] if self.pip else [])
        return tuple(dict.fromkeys([*implied, *self.debian_packages]))

    def content_hash(self) -> str:
        """sha256 over everything the build depends on (not `env`, which sessions get at start)."""
        recipe: dict[str, Any] = {"builder": BUILDER_VERSION, "pip": list(self.pip)}
        if self.from_debian:
            recipe |= {"suite": self.suite, "mirror": self.mirror, "packages": sorted(self.packages())}
        else:
            assert self.rootfs is not None
            recipe["rootfs"] = str(self.rootfs) if self.rootfs.is_dir() else _file_hash(self.rootfs)
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()

    def key(self) -> str:
        """The cache folder's name: `<name>-<first 16 hex digits of the content hash>`."""
        return f"{self.name}-{self.content_hash()[:16]}"


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_tarball(path: Path) -> bool:
    return path.name.endswith(TARBALL_SUFFIXES)


def load_spec(path: str | Path) -> EnvironmentSpec:
    """The environment at `path`: a spec file (YAML/JSON), a rootfs directory or a tarball."""
    path = Path(path).resolve()
    if not path.exists():
        raise EnvironmentBuildError(
            f"environment {path} does not exist; give a spec file ({', '.join(SPEC_SUFFIXES)}), a "
            "root filesystem directory or a tarball of one")
    if path.is_dir() or _is_tarball(path):
        name = path.name.split(".")[0].lower()
        return _checked(EnvironmentSpec(name=_safe_name(name), source=path, rootfs=path))
    if path.suffix not in SPEC_SUFFIXES:
        raise EnvironmentBuildError(
            f"environment {path}: unsupported file type {path.suffix!r}; use a spec file "
            f"({', '.join(SPEC_SUFFIXES)}), a directory or a tarball ({', '.join(TARBALL_SUFFIXES)})")
    return _checked(_from_mapping(_read(path), path))


def _read(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EnvironmentBuildError(f"environment spec {path} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise EnvironmentBuildError(f"environment spec {path} must be a mapping (name:, debian: ...)")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise EnvironmentBuildError(
            f"environment spec {path}: unknown key(s) {unknown}; valid keys: {sorted(_KEYS)}")
    return data


def _from_mapping(data: dict[str, Any], path: Path) -> EnvironmentSpec:
    def strings(value: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise EnvironmentBuildError(f"environment spec {path}: `{key}` must be a list of strings")
        return tuple(v.strip() for v in value)

    debian = data.get("debian")
    if ("debian" in data) == ("rootfs" in data):
        raise EnvironmentBuildError(
            f"environment spec {path}: give exactly one of `debian:` (packages from a Debian mirror) "
            "or `rootfs:` (a directory or tarball)")
    kwargs: dict[str, Any] = {}
    if debian is not None:
        if not isinstance(debian, dict) or set(debian) - _DEBIAN_KEYS:
            raise EnvironmentBuildError(
                f"environment spec {path}: `debian` must be a mapping with keys {sorted(_DEBIAN_KEYS)}")
        kwargs = {"debian_packages": strings(debian.get("packages"), "debian.packages"),
                  "suite": str(debian.get("suite", DEFAULT_SUITE)),
                  "mirror": str(debian.get("mirror", DEFAULT_MIRROR))}
    else:
        kwargs["rootfs"] = (path.parent / str(data["rootfs"])).resolve()
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise EnvironmentBuildError(f"environment spec {path}: `env` must be a mapping NAME: value")
    name = str(data.get("name") or path.stem)
    return EnvironmentSpec(name=name, source=path, pip=strings(data.get("pip"), "pip"),
                           env=tuple((str(k), str(v)) for k, v in env.items()), **kwargs)


def _safe_name(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]", "-", name) or "rootfs"


def _checked(spec: EnvironmentSpec) -> EnvironmentSpec:
    if not _NAME.match(spec.name):
        raise EnvironmentBuildError(
            f"environment {spec.source}: name {spec.name!r} must be lower-case letters, digits, "
            "'.', '_' or '-' (at most 64)")
    bad = [p for p in spec.debian_packages if not _PACKAGE.match(p)]
    if bad:
        raise EnvironmentBuildError(f"environment {spec.source}: {bad} are not Debian package names")
    if spec.rootfs is not None and not (spec.rootfs.is_dir() or (spec.rootfs.is_file() and _is_tarball(spec.rootfs))):
        raise EnvironmentBuildError(
            f"environment {spec.source}: rootfs {spec.rootfs} is neither a directory nor a tarball "
            f"({', '.join(TARBALL_SUFFIXES)})")
    return spec
