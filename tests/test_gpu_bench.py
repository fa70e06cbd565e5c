"""bench/gpu/run.sh on this CPU-only machine: the dry run prints the plan and exits 0; a real run
refuses without CUDA; bad inputs fail with a clear message. (The GPU run itself needs a GPU.)"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu" / "run.sh"

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="these check the CPU-only behaviour")


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=environ,
                          cwd=ROOT, timeout=180)


def run_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("run ")]


def test_dry_run_without_vllm_or_network_plans_the_in_process_cuda_path(tmp_path):
    result = run("--dry-run", "--offline", "--venv", str(tmp_path / "no-venv"), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert '"cuda": false' in result.stdout and "dry run: nothing was run" in result.stdout
    [command] = run_lines(result)
    for value in ("trainer=local", "trainer.device=cuda", "sampler=hf", "model=tiny"):
        assert f"--agentcore-rl-set {value}" in command
    assert "--agentcore-rl run tasks" in command and str(tmp_path / "hf") in command
    assert "setup " not in result.stdout
    assert not (tmp_path / "hf").exists()  # nothing ran


def test_dry_run_with_a_local_model_folder(tmp_path):
    from agentcore_rl_harness.models import prepare_model

    folder = prepare_model("tiny")
    result = run("--dry-run", "--offline", "--venv", str(tmp_path / "v"), "--model", str(folder))
    assert result.returncode == 0, result.stderr
    [command] = run_lines(result)
    assert f"--agentcore-rl-set model.name={folder.resolve()}" in command


def test_dry_run_with_an_index_plans_the_vllm_install_and_lora_sync(tmp_path):
    with socket.socket() as index:  # a package index that answers, on loopback
        index.bind(("127.0.0.1", 0))
        index.listen()
        venv = tmp_path / "venv"
        result = run("--dry-run", "--venv", str(venv), "--model", "hub",
                     env={"AGENTCORE_RL_GPU_INDEX": f"127.0.0.1:{index.getsockname()[1]}"})
    assert result.returncode == 0, result.stderr
    assert '"index": true' in result.stdout and '"hub": false' in result.stdout
    assert f"setup     {venv}/bin/python -m pip install -q vllm==" in result.stdout
    [command] = run_lines(result)
    for value in ("sampler=vllm", "trainer.serve_merged=false", f"sampler.vllm.venv={venv}",
                  "trainer.device=cuda", "model=tiny"):  # hub unreachable: the fallback model
        assert f"--agentcore-rl-set {value}" in command


def test_without_cuda_a_real_run_refuses_instead_of_running_on_cpu(tmp_path):
    result = run("--offline", "--venv", str(tmp_path / "v"), "--out", str(tmp_path))
    assert result.returncode == 2
    assert "sees no CUDA device" in result.stderr and "never falls back to CPU" in result.stderr
    assert "run " not in result.stdout and not (tmp_path / "hf").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--path", "vllm"], "has no vLLM and no package index answers"),
    (["trainer.device=cpu"], "trainer.device is 'cpu'; this script runs on CUDA only"),
    (["trainer.no_such_key=1"], "the run's config does not compose"),
])
def test_dry_run_refuses_what_it_cannot_do(tmp_path, args, message):
    result = run("--dry-run", "--offline", "--venv", str(tmp_path / "v"), *args)
    assert result.returncode != 0
    assert message in result.stderr


def test_a_model_that_is_neither_a_name_nor_a_folder_is_refused(tmp_path):
    result = run("--dry-run", "--offline", "--venv", str(tmp_path / "v"), "--model", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert "is neither tiny nor smollm2-135m-instruct nor a local Hugging Face folder" in result.stderr


def test_the_sampler_preflight_samples_with_the_real_in_process_sampler():
    """The check a GPU run makes before `sampler=hf` (there on cuda), here on the CPU: it passes."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "bench" / "gpu" / "smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    assert smoke.sampler_preflight("tiny", device="cpu") is None
    assert "CUDA" in smoke.sampler_preflight("tiny", device="cuda")  # no CUDA here: its error, not a crash


def test_the_summary_line_averages_the_recorded_sync_time_per_step(tmp_path):
    """The one line a GPU run prints: sync_s/step is the mean of steps.jsonl's `sync_s` (a step that
    synced nothing is left out), and a run without steps says n/a rather than guess."""
    import json

    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "bench" / "gpu" / "smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    (tmp_path / "train").mkdir()
    (tmp_path / "report.json").write_text(json.dumps({"delta": {"overall": {"pre": 0.25, "post": 0.5, "p_value": 0.1}}}))
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps({"turns": 2}) + "\n" for _ in range(5)))
    steps = [{"wall_time_s": {"train": 3.0}, "sync_s": 0.1}, {"wall_time_s": {"train": 5.0}, "sync_s": 0.3},
             {"wall_time_s": {"train": 1.0}, "sync_s": None}]
    (tmp_path / "train" / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    line = smoke.summary("vllm", tmp_path, 10.0, 0, "H100")
    assert "lift=0.250->0.500" in line and "turns/s=1.00 turns=10 steps=3" in line
    assert "train_s/step(incl. sync)=3.000 sync_s/step=0.200 " in line
    assert "sync_s/step=n/a" in smoke.summary("hf", tmp_path / "none", 1.0, 1, None)
