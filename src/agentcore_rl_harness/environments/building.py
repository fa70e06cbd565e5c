"""Building environments into the cache, and finding built ones.

A build runs `mmdebstrap` (Debian packages from the mirror) or extracts the given tarball, then
installs the spec's `pip:` packages with the environment's own python3 (run inside the new root
under bubblewrap, reaching PyPI), then checks that python3 can import what serves the agent
(`bedrock_agentcore`, `uvicorn`). It happens in a scratch folder renamed into place when done,
so a half-built environment is never used; a lock makes concurrent builders wait for one build.

Layout: `<cache>/envs/<name>-<hash16>/rootfs/` and `manifest.json` (the spec's hash, the build's
seconds, the root's size in bytes, the python version).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvironmentBuildError
from ..models import cache_dir
from .layout import root_mounts
from .spec import EnvironmentSpec

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
AGENT_MODULES = ("bedrock_agentcore", "uvicorn")  # what `_agent_server.py` imports
PYTHON = "/usr/bin/python3"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LOG_TAIL = 3000
# The host's way to PyPI, used by the build's pip (never kept in the environment).
PASSED_TO_PIP = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT", "HTTP_PROXY",
                 "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
_CA_INSIDE = "/tmp/arl-host-ca.pem"


@dataclass(frozen=True)
class BuiltEnvironment:
    """An environment ready to run sessions: its root filesystem and what the build measured."""

    spec: EnvironmentSpec
    root: Path
    python: str = PYTHON
    build_s: float | None = None
    size_bytes: int | None = None


def envs_dir() -> Path:
    """`$AGENTCORE_RL_CACHE/envs` (default `~/.cache/agentcore-rl/envs`)."""
    return cache_dir() / "envs"


def find_built(spec: EnvironmentSpec) -> BuiltEnvironment | None:
    """The built environment for `spec` (a rootfs directory in place is always ready)."""
    if spec.in_place:
        assert spec.rootfs is not None
        return BuiltEnvironment(spec=spec, root=spec.rootfs)
    folder = envs_dir() / spec.key()
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return BuiltEnvironment(spec=spec, root=folder / "rootfs", build_s=manifest.get("build_s"),
                            size_bytes=manifest.get("size_bytes"))


def require_built(spec: EnvironmentSpec) -> BuiltEnvironment:
    """`find_built`, or an error saying how to build it (no build, no download, at run time).
    A rootfs directory used in place is checked for a Python that can serve the agent."""
    if spec.in_place:
        return build(spec)
    built = find_built(spec)
    if built is None:
        raise EnvironmentBuildError(
            f"environment {spec.name!r} ({spec.source}) is not built: run `agentcore-rl env build "
            f"{spec.source}` once (it downloads Debian packages and pip packages; cached under "
            f"{envs_dir()} by content hash)")
    return built


def build(spec: EnvironmentSpec, *, force: bool = False) -> BuiltEnvironment:
    """Build `spec` into the cache (a no-op when it is there, unless `force`)."""
    if spec.in_place:
        built = find_built(spec)
        assert built is not None
        check_python(built.root, spec)
        return built
    envs_dir().mkdir(parents=True, exist_ok=True)
    with _lock(envs_dir() / f".{spec.key()}.lock"):
        found = find_built(spec)
        if found is not None and not force:
            return found
        folder = envs_dir() / spec.key()
        scratch = envs_dir() / f".building-{spec.key()}-{os.getpid()}"
        _remove(scratch)
        scratch.mkdir()
        started = time.monotonic()
        try:
            root = scratch / "rootfs"
            if spec.from_debian:
                _mmdebstrap(spec, root, scratch / "build.log")
            else:
                _copy_rootfs(spec, root)
            if spec.pip:
                _pip_install(spec, root, scratch / "build.log")
            version = check_python(root, spec)
            size = _size(root)
            manifest = {"name": spec.name, "hash": spec.content_hash(), "source": str(spec.source),
                        "build_s": round(time.monotonic() - started, 1), "size_bytes": size,
                        "python": version}
            (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            shutil.rmtree(folder, ignore_errors=True)
            scratch.rename(folder)
        finally:
            _remove(scratch)
    built = find_built(spec)
    assert built is not None
    logger.info("environment %s built in %.0f s (%.0f MB) at %s", spec.name, built.build_s or 0,
                (built.size_bytes or 0) / 1e6, built.root)
    return built


def _remove(scratch: Path) -> None:
    """Delete a scratch folder, first unmounting what a killed build left mounted in it (its
    /proc, /sys, /dev binds), so removing it never reaches into the host's."""
    inside = str(scratch.resolve()) + "/"
    with contextlib.suppress(OSError):
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(inside)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], *, what: str, spec: EnvironmentSpec, log: Path | None = None,
         hint: str) -> str:
    passed = {name: os.environ[name] for name in PASSED_TO_PIP if name in os.environ}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False,
                              env={"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **passed})
    except OSError as exc:
        raise EnvironmentBuildError(f"environment {spec.name!r}: cannot run {argv[0]}: {exc}; {hint}") from exc
    output = done.stdout + done.stderr
    if log is not None:
        with log.open("a") as handle:
            handle.write(f"$ {' '.join(argv)}\n{output}\n")
    if done.returncode != 0:
        raise EnvironmentBuildError(
            f"environment {spec.name!r} ({spec.source}): {what} failed (exit code {done.returncode}); "
            f"{hint}\n--- last output ---\n{output[-_LOG_TAIL:]}")
    return output


def _mmdebstrap(spec: EnvironmentSpec, root: Path, log: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise EnvironmentBuildError(
            f"environment {spec.name!r} is built from Debian packages with mmdebstrap, which is not "
            "installed: apt-get install mmdebstrap (or give a rootfs tarball instead)")
    _run(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(spec.packages()),
          "--aptopt=Acquire::Retries \"3\"", spec.suite, str(root), spec.mirror],
         what="mmdebstrap", spec=spec, log=log,
         hint=f"check the package names {list(spec.debian_packages)}, the suite {spec.suite!r} and "
              f"that the mirror {spec.mirror} is reachable")


def _copy_rootfs(spec: EnvironmentSpec, root: Path) -> None:
    assert spec.rootfs is not None
    root.mkdir()
    if spec.rootfs.is_dir():
        _run(["cp", "-a", f"{spec.rootfs}/.", str(root)], what="copying the rootfs", spec=spec,
             hint="check that the directory is readable")
    else:
        _run(["tar", "--numeric-owner", "-xf", str(spec.rootfs), "-C", str(root)],
             what="extracting the rootfs tarball", spec=spec,
             hint="give a tar of a root filesystem (e.g. `docker export CONTAINER > rootfs.tar`)")


def host_ca_bundle() -> str | None:
    """The CA bundle the host's own pip trusts (a proxy's CA included), for the build's pip."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"),
                      os.environ.get("REQUESTS_CA_BUNDLE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def _in_root(root: Path, argv: list[str], *, writable: bool) -> list[str]:
    """`argv` run with `root` as `/`, sharing the host's network. Writable (a build step): the
    root itself, with the host's resolver and CA bundle (at /tmp/arl-host-ca.pem); read-only (a
    check): laid out as a session's (`layout.py`), so a root without /dev, /proc or /tmp works."""
    bwrap = shutil.which("bwrap") or "bwrap"
    if not writable:
        return [bwrap, *root_mounts(root, []), "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--remount-ro", "/", "--setenv", "PATH", PATH, "--", *argv]
    resolver = ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    ca = host_ca_bundle()
    resolver += ["--ro-bind", ca, _CA_INSIDE] if ca else []
    return [bwrap, "--bind", str(root), "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            *resolver, "--setenv", "PATH", PATH, "--", *argv]


def _pip_install(spec: EnvironmentSpec, root: Path, log: Path) -> None:
    _require_python(root, spec)
    cert = ["--cert", _CA_INSIDE] if host_ca_bundle() else []
    _run(_in_root(root, [PYTHON, "-m", "pip", "install", "--no-cache-dir", "--break-system-packages",
                         "--root-user-action=ignore", "--disable-pip-version-check", "-q", *cert, *spec.pip],
                  writable=True),
         what=f"pip install {' '.join(spec.pip)}", spec=spec, log=log,
         hint="check the package names and pins (they install with the environment's own python3, "
              "from PyPI), and that pip is in the environment (python3-pip)")


def _require_python(root: Path, spec: EnvironmentSpec) -> None:
    if not os.path.lexists(root / PYTHON.lstrip("/")):
        raise EnvironmentBuildError(
            f"environment {spec.name!r} ({spec.source}) has no {PYTHON}: the agent runs inside it "
            "with the environment's own Python; install python3 in it (Debian: the python3 "
            "package; a Debian-built environment always has it)")


def check_python(root: Path, spec: EnvironmentSpec) -> str:
    """The environment's python3 version; an error if it is missing or cannot serve an agent."""
    _require_python(root, spec)
    probe = f"import sys, {', '.join(AGENT_MODULES)}; print(sys.version.split()[0])"
    try:
        return _run(_in_root(root, [PYTHON, "-c", probe], writable=False),
                    what=f"importing {', '.join(AGENT_MODULES)} with its python3", spec=spec,
                    hint="the agent is served inside the environment by its own python3, which needs "
                         "bedrock-agentcore: add `bedrock-agentcore` (and the agent's other packages) "
                         "to the spec's `pip:` list").strip().splitlines()[-1]
    except EnvironmentBuildError as exc:
        raise EnvironmentBuildError(f"environment {spec.name!r} lacks Python for the agent: {exc}") from None


def _size(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total
