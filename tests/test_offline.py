"""Nothing is downloaded at run time: the bundled suite runs with the network unreachable.

`HF_HUB_OFFLINE` only stops the libraries that read it; this runs `pytest --agentcore-rl eval
tasks` in a network namespace of its own (loopback only, for the gateway and the agents) and
without the HF offline variables, so any download attempt anywhere fails the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _isolated_network_prefix() -> list[str]:
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if not (unshare and ip):
        message = "needs util-linux `unshare` and iproute2 `ip` to cut the network"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    user_namespace = [] if os.geteuid() == 0 else ["-r"]
    return [unshare, *user_namespace, "-n", "--", "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]


def test_the_bundled_suite_runs_with_the_network_unreachable(tmp_path, tiny_model_dir):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))}
    out = tmp_path / "run"
    command = [*_isolated_network_prefix(), sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
               "--agentcore-rl", "eval", str(ROOT / "tasks"),
               "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", "eval=quick",
               "--agentcore-rl-set", "sampling.max_tokens=16", "--agentcore-rl-out", str(out)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 10
    statuses = {rollout["status"] for rollout in rollouts}
    assert statuses <= {"completed", "task_failed"}, statuses
    assert all(rollout["turns"] >= 1 for rollout in rollouts)  # every agent reached the gateway
