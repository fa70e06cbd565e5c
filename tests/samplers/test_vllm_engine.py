"""The vLLM launcher's failure paths, against a stand-in engine process (fake_vllm_server.py) in a
stand-in venv; its happy path against the real engine is in test_vllm_real.py."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentcore_rl_harness.errors import RuntimeStartError
from agentcore_rl_harness.samplers.vllm_engine import VLLMEngine, VLLMSettings, free_port

FAKE = Path(__file__).with_name("fake_vllm_server.py")


@pytest.fixture
def fake_venv(tmp_path):
    """A venv whose `python -m vllm.entrypoints.openai.api_server ...` runs the stand-in."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    python.chmod(0o755)
    return tmp_path / "venv"


def _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, mode, **settings):
    settings = VLLMSettings(venv=str(fake_venv), env={"FAKE_VLLM_MODE": mode}, **settings)
    return VLLMEngine(settings, model_dir=tiny_model_dir, tokenizer=tiny_tokenizer, log_dir=tmp_path / "run")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purposes
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_healthy_engine_starts_on_a_free_port_logs_in_the_run_dir_and_stops(
        fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer):
    engine = _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, "ok")
    with engine:
        pid = engine.process.pid
        assert engine.base_url.startswith("http://127.0.0.1:")
        assert engine.served_model == str(tiny_model_dir)
        assert "fake vLLM pid" in (tmp_path / "run" / "vllm.log").read_text()
    assert engine.process is None and not _alive(pid)


def test_a_port_in_use_is_named_before_anything_starts(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        engine = _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, "ok", port=port)
        with pytest.raises(RuntimeStartError, match=rf"127.0.0.1:{port}: the port is in use.*sampler.vllm.port=0"):
            engine.start()
    assert engine.process is None


def test_an_engine_that_dies_at_start_shows_its_last_log_lines(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer):
    engine = _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, "die")
    with pytest.raises(RuntimeStartError) as caught:
        engine.start()
    text = str(caught.value)
    assert "vLLM exited with code 3 while starting" in text
    assert "could not allocate its KV cache" in text and "engine init line 39" in text
    assert "engine init line 5\n" not in text  # only the tail


def test_an_engine_that_never_answers_times_out_and_is_stopped(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer):
    engine = _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, "hang", startup_timeout_s=2.0,
                     stop_timeout_s=2.0)
    with pytest.raises(RuntimeStartError, match=r"did not answer .*/health within 2 s.*startup_timeout_s"):
        engine.start()
    assert engine.process is None


@pytest.mark.parametrize("mode, message", [
    ("shifted", r"model/tokenizer mismatch: .* tokenizes the probe .*first difference at position 0"),
    ("vocab", r"model/tokenizer mismatch: .* knows id \d+ .*beyond the harness' vocabulary"),
])
def test_a_model_tokenizer_mismatch_stops_the_start(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, mode,
                                                     message):
    engine = _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, mode)
    with pytest.raises(RuntimeStartError, match=message):
        engine.start()
    assert engine.process is None


def test_a_server_you_run_that_is_not_reachable_is_named(tmp_path, tiny_model_dir, tiny_tokenizer):
    url = f"http://127.0.0.1:{free_port()}"
    engine = VLLMEngine(VLLMSettings(url=url, startup_timeout_s=1.0), model_dir=tiny_model_dir,
                        tokenizer=tiny_tokenizer)
    with pytest.raises(RuntimeStartError, match=rf"the vLLM server at {url} \(sampler.vllm.url\) is not reachable"):
        engine.start()


def test_a_missing_venv_says_how_to_build_it(tmp_path, tiny_model_dir, tiny_tokenizer):
    engine = VLLMEngine(VLLMSettings(venv=str(tmp_path / "none")), model_dir=tiny_model_dir, tokenizer=tiny_tokenizer)
    with pytest.raises(RuntimeStartError, match=r"no vLLM venv at .*scripts/vllm-venv"):
        engine.start()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_the_engine_goes_when_the_harness_is_stopped(fake_venv, tmp_path, tiny_model_dir, how):
    script = textwrap.dedent(f"""
        import time
        from agentcore_rl_harness.models import load_tokenizer
        from agentcore_rl_harness.samplers.vllm_engine import VLLMEngine, VLLMSettings
        engine = VLLMEngine(VLLMSettings(venv={str(fake_venv)!r}, env={{"FAKE_VLLM_MODE": "ok"}}),
                            model_dir={str(tiny_model_dir)!r}, tokenizer=load_tokenizer({str(tiny_model_dir)!r}),
                            log_dir={str(tmp_path)!r}).start()
        print(engine.process.pid, flush=True)
        time.sleep(600)
    """)
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        pid = int(harness.stdout.readline())
        assert _alive(pid)
        harness.send_signal(how)
        harness.wait(30)
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"the engine outlived the harness stopped by {how.name}"
    finally:
        harness.kill()


def test_a_failed_weight_sync_names_the_version_and_the_engines_answer(fake_venv, tmp_path, tiny_model_dir,
                                                                      tiny_tokenizer):
    """An engine without runtime LoRA updating (the stand-in has no such route: 404) fails the sync
    with an error naming the version, the route, the answer and the settings that fix it."""
    import peft

    from agentcore_rl_harness.errors import SamplingError
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.samplers.vllm_policy import VLLMPolicySampler

    model = peft.get_peft_model(load_model(tiny_model_dir), peft.LoraConfig(r=4, target_modules=["q_proj"]))
    with _engine(fake_venv, tmp_path, tiny_model_dir, tiny_tokenizer, "ok") as engine:
        sampler = VLLMPolicySampler(engine, adapter_dir=tmp_path / "adapters")
        with pytest.raises(SamplingError, match=r"weight sync of policy version 3 to vLLM failed: "
                                                r"/v1/load_lora_adapter answered 404.*VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
            sampler.publish_weights(model.get_base_model(), policy_version=3)
        assert sampler.policy_version == 0 and sampler.model_name == engine.served_model  # unchanged
        assert (tmp_path / "adapters" / "v3" / "adapter_model.safetensors").is_file()  # written, not lost
