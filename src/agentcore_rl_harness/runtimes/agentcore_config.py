"""The `runtime` node of `runtime=agentcore` (`conf/runtime/agentcore.yaml`): each session on AWS
Bedrock AgentCore Runtime through boto3 (`agentcore.py`), its quotas held by a limiter
(`limits.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ._invocations import RESULT_MODES
from .isolation import SandboxLimits
from .limits import LimiterSettings

# The limiter's keys were flat once (`runtime.limiter=ray`); each old key -> its place now.
MOVED_KEYS = {"limiter": "limiter.kind", "max_live_sessions": "limiter.max_live_sessions",
              "ray_address": "limiter.ray_address", "limiter_name": "limiter.name",
              "lease_ttl_s": "limiter.lease_ttl_s"}

# Keys of runtime=local that ACR cannot honour -> why, and the way to get it there (refused).
LOCAL_ONLY_KEYS = {
    "environments": "AgentCore Runtime runs every session of a runtime ARN in that runtime's container image, "
                    "so a task's environment is the image: deploy it (`agentcore-rl env dockerfile SPEC --agent "
                    "AGENT.py`, docs/environments.md, section 'Deploying the same environment to ACR'), map the "
                    "task to its runtime with +runtime.arns.<task>=<ARN> and drop runtime.environments",
}


@dataclass(frozen=True)
class AgentCoreRuntimeConfig:
    """`runtime=agentcore`: sessions on Bedrock AgentCore Runtime (pip install 'agentcore-rl-harness[aws]')."""

    kind: str = "agentcore"
    # Task name -> runtime ARN; key '*' serves every other task. Set one with
    # --agentcore-rl-set '+runtime.arns.test_arith=arn:aws:bedrock-agentcore:us-west-2:123456789012:runtime/calc-X'
    arns: dict[str, str] = field(default_factory=dict)
    region: str | None = None  # null = the region in each ARN
    qualifier: str = "DEFAULT"  # the runtime endpoint to invoke
    # Live sessions at once. 32: a session runs on AWS and costs this process one thread and
    # the gateway's turns only, so more fit than on a local machine (runtime=local: 8).
    concurrency: int = 32
    tps_per_arn: float = 25.0  # invokes + stops per second per ARN (ACR's default quota is 25)
    # inline: the response body is the result; s3: the agent writes it to S3 (ART contract);
    # start_get: a background invocation read back with get invokes (ART AgentCoreRuntimeApp)
    result_mode: str = "inline"
    s3_bucket: str | None = None  # result_mode=s3: the results bucket
    exp_id: str | None = None  # result_mode=s3: the results folder (null = a fresh id per run)
    endpoint_url: str | None = None  # override the bedrock-agentcore endpoint (VPC endpoint)
    s3_endpoint_url: str | None = None  # override the S3 endpoint
    max_invoke_attempts: int = 5  # resends only after errors proving the agent did not run (throttling, refused)
    retry_backoff_s: float = 0.5  # first wait before a resend, doubling up to retry_backoff_max_s
    retry_backoff_max_s: float = 8.0  # longest wait between resends
    read_timeout_s: float = 3600.0  # one blocking read of an invoke answer; kept above eval.timeout_s + 60
    poll_initial_s: float = 0.5  # result_mode=s3: first HEAD interval, grows by poll_backoff up to poll_max_s
    poll_max_s: float = 10.0  # result_mode=s3: longest HEAD interval
    poll_backoff: float = 1.5  # result_mode=s3: growth factor of the HEAD interval
    limiter: LimiterSettings = field(default_factory=LimiterSettings)  # who holds the quotas above
    priorities: dict[str, int] = field(default_factory=dict)  # task -> priority; default: evaluation 1 before training 0
    # Validated as for runtime=local, but ACR's microVM applies its own limits: keys set away
    # from their defaults are named in a warning when the runtime is built
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    def validate(self) -> None:
        if self.result_mode not in RESULT_MODES:
            raise ConfigError(f"runtime.result_mode={self.result_mode!r} is not supported; valid choices: "
                              f"{list(RESULT_MODES)}")
        if self.result_mode == "s3" and not self.s3_bucket:
            raise ConfigError("runtime.result_mode=s3 needs runtime.s3_bucket (the results bucket)")
        for key in ("concurrency", "max_invoke_attempts"):
            if getattr(self, key) < 1:
                raise ConfigError(f"runtime.{key}={getattr(self, key)} must be >= 1")
        if self.tps_per_arn <= 0:
            raise ConfigError(f"runtime.tps_per_arn={self.tps_per_arn} must be > 0")
        self.limiter.check()
