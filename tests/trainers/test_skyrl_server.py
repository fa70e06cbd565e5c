"""`trainer=skyrl` against a real SkyRL Tinker API server (skyrl 0.3.0, JAX backend, CPU).

SkyRL and its tinker SDK cannot share this python (skyrl 0.3.0 speaks tinker <= 0.24.1, the
harness's own trainer=tinker needs 0.38), so both live in venvs made by `scripts/skyrl-venvs`:
the server runs `skyrl_server.py` in `$AGENTCORE_RL_SKYRL_VENV`, and `skyrl_client_check.py`
runs one GRPO step through the harness in `$AGENTCORE_RL_TINKER024_VENV` and prints its verdict.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from agentcore_rl_harness.trainers.tinker import summed_token_loss

HERE = Path(__file__).parent
VENV_VARS = ("AGENTCORE_RL_SKYRL_VENV", "AGENTCORE_RL_TINKER024_VENV")
SERVER_VERSION = "0.3.0"
STARTUP_TIMEOUT_S = 240.0


def test_summed_token_loss_is_the_loss_skyrl_reports_per_token():
    """SkyRL's forward_backward metrics are empty; its per-token losses are summed instead."""
    def tensor(*values):  # what the SDK's TensorData exposes
        return SimpleNamespace(data=list(values))

    outputs = [{"elementwise_loss": tensor(0.5, -0.25), "logprobs": tensor(-1.0, -2.0)},
               {"elementwise_loss": tensor(0.125), "logprobs": tensor(-0.5)}]
    assert summed_token_loss(outputs) == pytest.approx(0.375)
    assert summed_token_loss([outputs[0], {"logprobs": tensor(-1.0)}]) is None
    assert summed_token_loss([]) is None


# Where scripts/skyrl-venvs puts the venvs by default (the env vars point elsewhere).
DEFAULT_VENVS = {
    "AGENTCORE_RL_SKYRL_VENV": Path.home() / ".cache" / "agentcore-rl" / "venvs" / "skyrl-0.3.0",
    "AGENTCORE_RL_TINKER024_VENV": Path.home() / ".cache" / "agentcore-rl" / "venvs" / "tinker-0.24.1",
}


def _venv(variable: str) -> Path | None:
    if os.environ.get(variable):
        return Path(os.environ[variable])
    default = DEFAULT_VENVS[variable]
    return default if (default / "bin" / "python").exists() else None


@pytest.fixture(scope="module")
def venvs():
    found = {name: _venv(name) for name in VENV_VARS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        reason = (f"needs the SkyRL server and tinker 0.24.1 venvs ({' and '.join(missing)} unset and "
                  f"nothing at the default place); create them with `bash scripts/skyrl-venvs`")
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-SkyRL test: {reason}")
        pytest.skip(reason)
    pythons = []
    for name, path in found.items():
        python = path / "bin" / "python"
        if not python.exists():
            pytest.fail(f"{name}: {path} has no bin/python; run scripts/skyrl-venvs")
        pythons.append(python)
    return tuple(pythons)


def _host_site() -> str:
    """This interpreter's site-packages: the client venv appends it after its own (scripts/skyrl-venvs)."""
    import sysconfig

    return sysconfig.get_path("purelib")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def skyrl_server(venvs, tiny_model_dir, tmp_path_factory):
    """SkyRL's Tinker API server on the tiny model; yields (base_url, base_model)."""
    server_python, _ = venvs
    workdir = tmp_path_factory.mktemp("skyrl-server")
    port = _free_port()
    base_model = str(tiny_model_dir)
    log_path = workdir / "server.log"
    command = [
        str(server_python), str(HERE / "skyrl_server.py"), "--base-model", base_model, "--backend", "jax",
        "--host", "127.0.0.1", "--port", str(port), "--database-url", f"sqlite:///{workdir / 'tinker.db'}",
        "--checkpoints-base", str(workdir / "checkpoints"),
        "--backend-config", json.dumps({"max_lora_adapters": 2, "max_lora_rank": 8}),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the SkyRL server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(base_url + "/", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the SkyRL server did not answer in {STARTUP_TIMEOUT_S} s:\n"
                            f"{log_path.read_text()[-4000:]}")
            time.sleep(1.0)
        yield base_url, base_model, log_path
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (the API server and its engine), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.slow
def test_one_step_on_a_real_skyrl_server_moves_the_sampler_to_new_weights(venvs, skyrl_server):
    _, client_python = venvs
    base_url, base_model, log_path = skyrl_server
    result = subprocess.run(
        [str(client_python), str(HERE / "skyrl_client_check.py"), "--base-url", base_url,
         "--base-model", base_model, "--server-version", SERVER_VERSION],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TINKER_TELEMETRY": "0", "AGENTCORE_RL_HOST_SITE": _host_site()},
    )
    assert result.returncode == 0, (result.stdout[-2000:] + result.stderr[-4000:]
                                    + "\n--- server log ---\n" + log_path.read_text()[-3000:])
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps({key: verdict[key] for key in ("loss", "grad_norm", "sampler_kl", "build_s", "step_s")}),
          file=sys.stderr)
    assert verdict["tinker_version"] == "0.24.1"
    assert verdict["policy_version_before"] == [0, 0, 0, 0]
    assert verdict["policy_version"] == verdict["sampler_policy_version"] == verdict["step_policy_version"] == 1
    assert verdict["after_policy_version"] == 1
    assert verdict["trained_tokens"] == verdict["sampled_tokens"] > 0
    assert verdict["loss"] is not None and verdict["grad_norm"] is not None and verdict["grad_norm"] > 0
    assert verdict["sampler_kl"] == pytest.approx(0.0, abs=1e-3)  # the server scored the sampled tokens alike
    # Same seed after the step: other tokens, or the rewarded tokens became more likely.
    before_tokens, before_logprobs = verdict["before_tokens"], verdict["before_logprobs"]
    after_tokens, after_logprobs = verdict["after_tokens"], verdict["after_logprobs"]
    assert after_tokens != before_tokens or sum(after_logprobs) > sum(before_logprobs)
    assert after_logprobs != before_logprobs
