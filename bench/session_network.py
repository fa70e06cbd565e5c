"""What an isolated network costs per local session: `runtime.network.mode=isolated` vs `host`.

Both arms run real bubblewrap sessions of the same agent (tests/runtimes/agents/echo_agent.py)
through `LocalRuntime`, in alternating rounds in one process, so load shifts on a shared machine
fall on both. Per arm: wall ms per session (start, one invoke, teardown) and CPU ms per session
of this process and the children it reaped: the harness's side (relays, setns) and bubblewrap
itself, where the namespaces are made. The agent interpreter inside (the same in both arms, ~0.8
CPU-s) is killed with its namespace and never reaped here, so it is not in that figure. A second
measure isolates the namespace alone: `bwrap ... true` with and without `--unshare-net`.

Run:  python bench/session_network.py [--sessions 8] [--concurrency 4] [--rounds 3] [--bare 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.runtimes.base import AgentRef  # noqa: E402
from agentcore_rl_harness.runtimes.isolation import IsolationChoice  # noqa: E402
from agentcore_rl_harness.runtimes.local import LocalRuntime  # noqa: E402
from agentcore_rl_harness.runtimes.network import NetworkPolicy  # noqa: E402

AGENT = AgentRef(task="bench", agent=str(ROOT / "tests" / "runtimes" / "agents" / "echo_agent.py"))


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def one_arm(mode: str, sessions: int, concurrency: int) -> dict:
    runtime = LocalRuntime(LocalRuntimeConfig(concurrency=concurrency, startup_timeout_s=120), kill_grace_s=0.5, isolation=IsolationChoice(kind="bwrap", network=NetworkPolicy(mode=mode)))
    payload = {"x": 1, "_rollout": {"base_url": "http://127.0.0.1:9/v1"}}
    cpu, wall = cpu_s(), time.perf_counter()
    try:
        outcomes = await asyncio.gather(*(
            runtime.run_session(agent=AGENT, session_id=f"bench-{mode}-{i:04d}-" + "x" * 30,
                                payload=payload, timeout_s=120)
            for i in range(sessions)))
    finally:
        await runtime.aclose()
    wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
    failed = [o.error for o in outcomes if o.status.value != "completed"]
    if failed:
        raise SystemExit(f"{mode}: {len(failed)} sessions failed: {failed[0]}")
    return {"mode": mode, "wall_ms_per_session": 1000 * wall / sessions,
            "cpu_ms_per_session": 1000 * cpu / sessions}


def bare(unshare_net: bool, count: int) -> float:
    """Wall ms per `bwrap ... true` (the namespace set-up and teardown alone)."""
    argv = ["bwrap", "--die-with-parent", "--unshare-user", "--unshare-pid", "--cap-drop", "ALL",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            *(["--unshare-net"] if unshare_net else []), "--", "true"]
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(argv, check=True)
    return 1000 * (time.perf_counter() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="sessions per arm per round")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bare", type=int, default=40, help="bwrap runs per arm per round")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"host": [], "isolated": []}
    bare_ms: dict[bool, list[float]] = {False: [], True: []}
    for round_index in range(args.rounds):
        for mode in ("host", "isolated") if round_index % 2 == 0 else ("isolated", "host"):
            row = asyncio.run(one_arm(mode, args.sessions, args.concurrency))
            row.update(round=round_index + 1, loadavg_1m=os.getloadavg()[0])
            rows[mode].append(row)
            print(json.dumps(row), flush=True)
        for unshare in (False, True):
            bare_ms[unshare].append(bare(unshare, args.bare))
    median = {mode: {key: statistics.median(r[key] for r in found)
                     for key in ("wall_ms_per_session", "cpu_ms_per_session")}
              for mode, found in rows.items()}
    print(f"medians over {args.rounds} rounds, {args.sessions} sessions per arm, "
          f"concurrency {args.concurrency}:")
    print("network  | wall ms / session | CPU ms / session (harness + bwrap)")
    for mode in ("host", "isolated"):
        print(f"{mode:8} | {median[mode]['wall_ms_per_session']:17.1f} | "
              f"{median[mode]['cpu_ms_per_session']:16.1f}")
    ratio_wall = median["isolated"]["wall_ms_per_session"] / median["host"]["wall_ms_per_session"]
    ratio_cpu = median["isolated"]["cpu_ms_per_session"] / median["host"]["cpu_ms_per_session"]
    print(f"isolated / host: wall {ratio_wall:.2f}x, CPU {ratio_cpu:.2f}x")
    plain, unshared = statistics.median(bare_ms[False]), statistics.median(bare_ms[True])
    print(f"bwrap true: {plain:.1f} ms, with --unshare-net {unshared:.1f} ms "
          f"({unshared / plain:.2f}x)")


if __name__ == "__main__":
    main()
