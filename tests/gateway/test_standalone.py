"""`run_standalone`: serves a named model until stopped; unsupported samplers fail clearly."""

from __future__ import annotations

import io
import threading
import time

import httpx
import pytest

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.gateway.standalone import run_standalone


@pytest.mark.parametrize("sampler, match", [("vllm", "not implemented yet"), ("nope", "unknown sampler")])
def test_unsupported_samplers_are_clear_errors(sampler, match):
    with pytest.raises(ConfigError, match=match):
        run_standalone(model="tiny", sampler=sampler)


def test_serves_until_stopped(tiny_model_dir):
    out, stop = io.StringIO(), threading.Event()
    thread = threading.Thread(target=run_standalone, kwargs=dict(
        model=str(tiny_model_dir), admin_token="t0ken", out=out, stop_event=stop))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while "gateway: " not in out.getvalue():
            assert thread.is_alive() and time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
        base_url = out.getvalue().split("gateway: ")[1].split()[0]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert "admin token" not in out.getvalue()  # given, so not printed
        opened = httpx.post(base_url.removesuffix("/v1") + "/admin/sessions", headers={"X-Admin-Token": "t0ken"})
        assert opened.status_code == 201
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
