"""Per-task environments: root filesystems a task's local sessions run in (`spec.py` reads
them, `building.py` builds and caches them, `dockerfile.py` writes the same one as a Dockerfile)."""

from .building import BuiltEnvironment, build, envs_dir, find_built, require_built
from .spec import EnvironmentSpec, load_spec

__all__ = ["BuiltEnvironment", "EnvironmentSpec", "build", "envs_dir", "find_built", "load_spec",
           "require_built"]
