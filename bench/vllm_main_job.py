"""The arithmetic main job (the bundled `tasks/`) with `sampler=vllm` beside the in-process sampler,
in one invocation: each arm is one `bench/rl_lift.py` run (pre-eval, GRPO, post-eval) in a fresh
run directory; printed per arm: lift, wall time, CPU time (this process' children: the harness,
its agents and, for vLLM, the engine it launches) and peak RSS of the largest child. The vLLM arm
pushes LoRA adapters after each step (`trainer.serve_merged=false`) and reports its sync times.

    HF_HUB_OFFLINE=1 python bench/vllm_main_job.py [--arms hf,vllm] [extra --agentcore-rl-set overrides]

Needs the venv of `scripts/vllm-venv`. On 2 shared cores a full main job takes tens of minutes
per arm: pass e.g. `trainer.steps=2` for a quick look.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "hf": [],
    "vllm": ["sampler=vllm", "model=smollm2-135m-instruct", "trainer.serve_merged=false", "trainer.lora_rank=8",
             "sampler.vllm.max_lora_rank=8"],
}


def run_arm(name: str, overrides: list[str], out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, str(ROOT / "bench" / "rl_lift.py"), "--out", str(out), *ARMS[name], *overrides]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)  # noqa: S603
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"arm": name, "rc": finished.returncode, "wall_s": round(time.perf_counter() - started, 1),
              "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
              "peak_rss_mb": round(after.ru_maxrss / 1024)}
    report = out / "report.json"
    if report.is_file():
        delta = json.loads(report.read_text()).get("delta", {}).get("overall", {})
        result.update(pre=delta.get("pre"), post=delta.get("post"), p_value=delta.get("p_value"))
    steps = out / "train" / "steps.jsonl"
    if steps.is_file():
        result["steps"] = len(steps.read_text().splitlines())
    if finished.returncode != 0:
        result["tail"] = (finished.stdout + finished.stderr)[-2000:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="hf,vllm")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="vllm-main-job-"))
    results = [run_arm(name, args.overrides, base / name) for name in args.arms.split(",")]
    for result in results:
        print(json.dumps(result))
    return max(r["rc"] for r in results)


if __name__ == "__main__":
    sys.exit(main())
