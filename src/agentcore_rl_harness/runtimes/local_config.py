"""The `runtime` node of `runtime=local` (`conf/runtime/local.yaml`): one isolated OS process per
agent session on this machine, serving the ACR HTTP contract (`local.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ._invocations import RESULT_MODES
from .isolation import ISOLATION_KINDS, START_METHODS, SandboxLimits
from .network import NetworkPolicy


@dataclass(frozen=True)
class LocalRuntimeConfig:
    """`runtime=local`: agent sessions as isolated processes on this machine."""

    kind: str = "local"
    # Agent sessions alive at once. 8: each is a Python process on this machine (about 0.8
    # CPU-seconds to start, tens of MB each), and they share the cores with the sampler.
    concurrency: int = 8
    startup_timeout_s: float = 180.0  # seconds an agent process may take to serve its first request (many starting at once on 2 cores take minutes)
    env_passthrough: tuple[str, ...] = ()  # extra environment variable names the agent process may see
    # spawn: a fresh interpreter per session; fork: forked from a per-agent zygote that imported
    # the agent once (isolation=none only); auto: spawn when sessions are isolated, else fork
    start_method: str = "auto"
    # bwrap: own user/mount/PID namespaces per session (bubblewrap); uid: a uid per session (root,
    # no bwrap); none: no walls (warned); auto: the strongest this machine supports
    isolation: str = "auto"
    limits: SandboxLimits = field(default_factory=SandboxLimits)  # rlimits of every session process
    network: NetworkPolicy = field(default_factory=NetworkPolicy)  # what a bwrap session reaches
    hidden_paths: tuple[str, ...] = ()  # more host paths no session may see (bwrap); the run dir always is
    readable_paths: tuple[str, ...] = ()  # host paths bound read-only into every session under a hidden one
    # task name -> its environment (a spec file, rootfs directory or tarball; see
    # docs/environments.md), replacing the one its @arl.task(environment=...) names
    environments: dict[str, str] = field(default_factory=dict)
    final_state_mb: int = 16  # the most of a session's final files kept for the `sandbox` fixture
    keep_final_state: bool = True  # also save them as states/<session>.tar.gz in the run dir (rescore)
    # inline: the answer is the result; s3: agents that save their result to S3 (AgentCoreRLApp)
    # write it to a loopback stand-in for S3, no AWS needed; start_get: a background invocation
    # read back with get invokes
    result_mode: str = "inline"
    s3_bucket: str | None = None  # result_mode=s3: the bucket name agents are told (null: arl-local-results)
    exp_id: str | None = None  # result_mode=s3: the results folder (null: a fresh id per run)

    def validate(self) -> None:
        for key, value, choices in (("start_method", self.start_method, START_METHODS),
                                    ("isolation", self.isolation, ISOLATION_KINDS),
                                    ("result_mode", self.result_mode, RESULT_MODES)):
            if value not in choices:
                raise ConfigError(f"runtime.{key}={value!r} is not supported; valid choices: {list(choices)}")
        if self.concurrency < 1:
            raise ConfigError(f"runtime.concurrency={self.concurrency} must be >= 1")
        if self.final_state_mb < 1:
            raise ConfigError(f"runtime.final_state_mb={self.final_state_mb} must be >= 1")
        self.limits.check()
        self.network.check()
