"""Sessions whose `/` is a task's environment (`environments/`), under bubblewrap.

The environment's root filesystem is the session's `/`, read-only: its top-level entries are
bound one by one onto bubblewrap's own (then read-only) root, so the host paths a session needs
- its writable directory, the agent's folder, the harness's `_agent_server.py` - get mount
points even where the environment has no such folder. A folder of the environment that must
hold such a mount point is recreated from its entries the same way. `/tmp` and `/var/tmp` are
fresh tmpfs (sized like the session's disk cap); nothing else of the host is visible. The agent
runs with the environment's python3, `PATH` is Debian's, `PYTHONPATH` names only the agent's
folder and the harness source, and the spec's `env:` is added.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..environments.building import PATH, BuiltEnvironment, require_built
from ..environments.layout import root_mounts
from ..environments.spec import load_spec
from ..errors import ConfigError
from .isolation import Bubblewrap, Isolation, LaunchPlan

_TMPFS = (Path("/tmp"), Path("/var/tmp"))


class RootedBubblewrap(Bubblewrap):
    """A `Bubblewrap` isolation whose sessions run in `environment` (see the module docstring)."""

    name = "bwrap"

    def __init__(self, base: Bubblewrap, environment: BuiltEnvironment, *, harness_src: Path) -> None:
        super().__init__(base.limits, bwrap=base.bwrap, hidden=base.hidden, readable=base.readable,
                         writable=base.writable, network=base.network)
        self.environment = environment
        self.harness_src = harness_src

    @property
    def python(self) -> str:
        return self.environment.python

    def _mounts(self, workdir: Path, readable: list[Path]) -> list[str]:
        bound = list(dict.fromkeys([*self.readable, *readable, self.harness_src]))
        needed = [*bound, *self.writable, workdir, Path("/etc/hosts"), *_TMPFS]
        command = [*root_mounts(self.environment.root, needed),
                   "--dev", "/dev", "--proc", "/proc"]
        size = self._tmpfs_size()
        for path in _TMPFS:
            command += [*size, "--tmpfs", str(path)]
        for path in sorted(bound, key=lambda p: len(p.parts)):
            if path.exists():
                command += ["--ro-bind", str(path), str(path)]
        for path in self.writable:
            command += ["--bind", str(path), str(path)]
        return command

    def _sealed(self) -> list[str]:
        return ["--remount-ro", "/"]  # bubblewrap's own root, where the mount points were made

    def session_tmpfs(self, workdir: Path) -> list[Path]:
        return list(_TMPFS)

    def enter(self, argv: Sequence[str], *, host_pid: int, cwd: str) -> LaunchPlan:
        """nsenter opens `--wd` before it joins the session; a host path would be a directory
        outside the session's root (getcwd fails, a JVM does not start), so it is opened
        through the session's own root."""
        return super().enter(argv, host_pid=host_pid, cwd=f"/proc/{host_pid}/root{cwd}")

    def session_env(self, env: dict[str, str]) -> dict[str, str]:
        """The agent's folder and the harness source (the first two import roots `local.py`
        names) are all of the host's Python a session sees: the environment brings the rest."""
        roots = env.get("PYTHONPATH", "").split(os.pathsep)[:2]
        return {**env, "PATH": PATH, "PYTHONPATH": os.pathsep.join(roots),
                **dict(self.environment.spec.env)}


def rooted_isolation(base: Isolation, environment: str, *, task: str, harness_src: Path) -> Isolation:
    """`base` rooted in the built environment at `environment` (a spec path); a clear error
    when it is not built or the runtime's sessions are not bubblewrap's."""
    if not isinstance(base, Bubblewrap):
        raise ConfigError(
            f"task {task!r} runs in the environment {environment}, which needs bubblewrap "
            f"sessions, but runtime.isolation is {base.name!r}: install bubblewrap (apt-get "
            "install bubblewrap) and use runtime.isolation=auto or bwrap")
    return RootedBubblewrap(base, require_built(load_spec(environment)), harness_src=harness_src)
