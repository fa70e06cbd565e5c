"""`agentcore-rl tinker-server` as a real subprocess, reached with the tinker SDK."""

import os
import selectors
import shutil
import subprocess
import sys
import time

import pytest

tinker = pytest.importorskip("tinker")


def _read_line(process, timeout_s):
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if selector.select(timeout=0.2):
            return process.stdout.readline().strip()
        if process.poll() is not None:
            break
    raise AssertionError(f"tinker-server printed no URL within {timeout_s} s (exit code {process.poll()})")


@pytest.mark.slow
def test_cli_serves_the_sdk(tmp_path, tiny_model_dir):
    command = shutil.which("agentcore-rl")
    argv = [command] if command else [sys.executable, "-m", "agentcore_rl_harness.cli"]
    process = subprocess.Popen(
        [*argv, "tinker-server", "--model", "tiny", "--port", "0", "--checkpoint-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        base_url = _read_line(process, 120)
        assert base_url.startswith("http://127.0.0.1:")
        client = tinker.ServiceClient(base_url=base_url, api_key="tml-cli-test")
        training = client.create_lora_training_client(base_model="tiny", rank=2).result()
        assert training.get_info().lora_rank == 2
        client.close("success").result(timeout=30)
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert "model tiny loaded" in stderr
    assert "created LoRA model" in stderr
