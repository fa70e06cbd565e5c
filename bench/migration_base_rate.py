"""The migration pack's base rate per level: `pytest --agentcore-rl eval tasks/migration` with
the pack's CPU config (SmolLM2-135M-Instruct, every test row: 10 per level), then per level:
success, mean reward, each reward's mean, how episodes ended, tool calls per episode (and per
successful one), wall time and peak RSS.

    HF_HUB_OFFLINE=1 python bench/migration_base_rate.py [--out DIR] [overrides...]
    python bench/migration_base_rate.py --summarize RUN_DIR     # a run that already ran (or was stopped)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "tasks" / "migration"


def summarize(run_dir: Path) -> dict:
    by_level: dict[str, list[dict]] = collections.defaultdict(list)
    for line in (run_dir / "rollouts.jsonl").read_text().splitlines():
        record = json.loads(line)
        by_level[record["task"].rsplit("_", 1)[-1]].append(record)
    summary = {}
    for level, records in sorted(by_level.items()):
        scored = [r for r in records if r["status"] in ("completed", "task_failed")]
        wins = [r for r in records if r["success"]]
        rewards = collections.defaultdict(list)
        for record in scored:
            for name, value in record["rewards"].items():
                rewards[name].append(value)
        calls = [(r["result"] or {}).get("tool_calls", 0) for r in scored]
        summary[level] = {
            "rollouts": len(records),
            "success": f"{len(wins)}/{len(records)}",
            "mean_reward": round(sum(r["reward"] or 0 for r in scored) / max(len(scored), 1), 3),
            "rewards": {name: round(sum(v) / len(v), 3) for name, v in rewards.items()},
            "status": dict(collections.Counter(r["status"] for r in records)),
            "stop_reason": dict(collections.Counter((r["result"] or {}).get("stop_reason") for r in scored)),
            "tool_calls_per_episode": round(sum(calls) / max(len(calls), 1), 2),
            "tool_calls_per_success": round(sum((r["result"] or {}).get("tool_calls", 0) for r in wins)
                                            / len(wins), 2) if wins else None,
        }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: a temp dir)")
    parser.add_argument("--summarize", type=Path, default=None, help="only summarize this run directory")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. eval.max_rows=2")
    args = parser.parse_args()
    if args.summarize:
        print(json.dumps(summarize(args.summarize), indent=2))
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="migration-base-")) / "run"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PACK), "--agentcore-rl",
               "eval", "--agentcore-rl-config", str(PACK / "configs"), "--agentcore-rl-out", str(out)]
    for override in args.overrides:
        command += ["--agentcore-rl-set", override]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started = time.monotonic()
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if not (out / "rollouts.jsonl").is_file():
        print(completed.stdout[-4000:], completed.stderr[-4000:], sep="\n")
        return 1
    print(json.dumps({"command": " ".join(command), "exit": completed.returncode, "wall_min": round(wall / 60, 1),
                      "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2, 2),
                      "levels": summarize(out)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
