"""One harness process of a Ray-limited job: `--sessions` agentcore sessions on one ARN through
the data-plane stub, its quotas held by the job's shared Ray limiter. Prints a JSON summary.

Run by tests/runtimes/test_ray_limiter.py (and bench/scale.py's shape): the Ray address, the
limiter's name and its quotas come as flags; AWS credentials are the tests' fake ones.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets

from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig
from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
from agentcore_rl_harness.runtimes.base import AgentRef
from agentcore_rl_harness.runtimes.limits import LimiterSettings, build_limiter


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--arn", required=True)
    parser.add_argument("--ray-address", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--tps", type=float, default=25.0)
    parser.add_argument("--max-live", type=int, default=16)
    parser.add_argument("--lease-ttl-s", type=float, default=30.0)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    args = parser.parse_args()
    limiter = build_limiter(
        LimiterSettings(kind="ray", max_live_sessions=args.max_live, ray_address=args.ray_address,
                        name=args.name, lease_ttl_s=args.lease_ttl_s),
        tps_per_arn={args.arn: args.tps}, concurrency=args.sessions,
    )
    runtime = AgentCoreRuntime(AgentCoreRuntimeConfig(arns={"*": args.arn}, endpoint_url=args.endpoint, concurrency=args.sessions, retry_backoff_s=0.01), limiter=limiter)
    payload = {"mode": "sleep", "sleep_s": args.sleep_s, "x": 1} if args.sleep_s else {"x": 1}
    print(json.dumps({"ready": True}), flush=True)
    outcomes = await asyncio.gather(*(
        runtime.run_session(
            agent=AgentRef(task="t", agent=None, phase="eval"),
            session_id="arl-" + secrets.token_hex(20), payload=payload, timeout_s=600,
        )
        for _ in range(args.sessions)
    ))
    await runtime.aclose()
    statuses = collections.Counter(outcome.status.value for outcome in outcomes)
    errors = sorted({outcome.error for outcome in outcomes if outcome.error})[:3]
    print(json.dumps({"statuses": statuses, "errors": errors, "stats": dict(runtime.stats)}),
          flush=True)


if __name__ == "__main__":
    asyncio.run(main())
