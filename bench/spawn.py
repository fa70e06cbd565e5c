"""What one session command costs the harness to start while it holds a trainer-sized heap.

Every `sandbox.exec` / `get_file` (a task's reward reading the session's files, the final-state
restore) starts a process from the harness, on its event loop. A start with a Python `preexec_fn`
must fork, which copies the page tables of the whole harness (a trainer holds ~6 GB in 4 KiB
pages); a plan with no preexec (a `prlimit` prefix for the limits, `start_new_session` for the
session) lets CPython use vfork. This starts `cat` through `NoIsolation`'s plans both ways, from
this process after it allocates `--heap-gb` of small objects, and prints each mean and the ratio.

    python bench/spawn.py [--heap-gb 3] [--starts 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from agentcore_rl_harness.runtimes import isolation as module
from agentcore_rl_harness.runtimes.isolation import NoIsolation, SandboxLimits


async def mean_start_ms(plan_for, starts: int) -> float:
    started = time.perf_counter()
    for _ in range(starts):
        plan = plan_for()
        process = await asyncio.create_subprocess_exec(
            *plan.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, **plan.popen_kwargs())
        out, err = await process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{plan.argv} failed: {err.decode()}")
    return (time.perf_counter() - started) / starts * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heap-gb", type=float, default=3.0, help="small objects to hold first (4 KiB pages)")
    parser.add_argument("--starts", type=int, default=20)
    args = parser.parse_args()
    if module._prlimit() is None:
        print("util-linux's prlimit is missing: every plan uses the preexec fork", file=sys.stderr)
        return 1
    heap = [bytes(4000) + bytes([i % 256]) for i in range(int(args.heap_gb * 2**30) // 4100)]
    isolation = NoIsolation(SandboxLimits())
    argv = ["cat", str(Path(__file__))]
    vfork = asyncio.run(mean_start_ms(lambda: isolation.enter(argv, host_pid=0, cwd="."), args.starts))
    prlimit, module._prlimit = module._prlimit, lambda: None
    try:
        forked = asyncio.run(mean_start_ms(lambda: isolation.enter(argv, host_pid=0, cwd="."), args.starts))
    finally:
        module._prlimit = prlimit
    print(f"heap {args.heap_gb:g} GB in {len(heap)} objects, {args.starts} starts each")
    print(f"preexec fork (before)   {forked:8.1f} ms a start")
    print(f"prlimit + vfork (now)   {vfork:8.1f} ms a start   ({forked / vfork:.0f}x faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
