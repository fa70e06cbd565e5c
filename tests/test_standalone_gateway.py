"""`run_standalone`: serves a named model until stopped; unsupported samplers fail clearly."""

from __future__ import annotations

import contextlib
import io
import threading
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from loopback_app import serving
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.standalone_gateway import run_standalone


@pytest.mark.parametrize("options, match", [
    ({"sampler": "nope"}, "unknown sampler"),
    ({"sampler": "vllm"}, "needs --sampler-url"),
    ({"sampler": "sglang"}, "needs --sampler-url"),
    ({"sampler": "hf", "sampler_url": "http://x"}, "remote samplers only"),
    ({"history": "sometimes"}, "is not a history mode"),
])
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(ConfigError, match=match):
        run_standalone(model="tiny", **options)


@contextlib.contextmanager
def _standalone(**options):
    out, stop = io.StringIO(), threading.Event()
    thread = threading.Thread(target=run_standalone, kwargs=dict(admin_token="t0ken", out=out, stop_event=stop,
                                                                 **options))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while "gateway: " not in out.getvalue():
            assert thread.is_alive() and time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
        yield out.getvalue().split("gateway: ")[1].split()[0]
    finally:
        stop.set()
        thread.join(timeout=30)


def test_vllm_sampler_gets_the_session_as_its_sticky_routing_key(tiny_model_dir):
    """`--sampler vllm`: the turn's tokens come from the vLLM endpoint, which sees the session id
    in `X-Session-Id` (answer shape as in tests/samplers/test_vllm.py)."""
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer
    from agentcore_rl_harness.models import load_tokenizer

    renderer = ChatTemplateRenderer(load_tokenizer(tiny_model_dir))
    reply = [*renderer.encode("Hello there"), renderer.stop_token_ids[0]]
    seen = []

    async def generate(request):
        body = await request.json()
        seen.append((request.headers.get("x-session-id"), body))
        return JSONResponse({"request_id": body["request_id"], "choices": [{
            "index": 0, "finish_reason": "stop", "token_ids": reply,
            "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in reply]}}]})

    app = Starlette(routes=[Route("/inference/v1/generate", generate, methods=["POST"])])
    with serving(app) as url:
        with _standalone(model=str(tiny_model_dir), sampler="vllm", sampler_url=url, history="template") as base_url:
            admin = {"X-Admin-Token": "t0ken"}
            session_id = httpx.post(base_url.removesuffix("/v1") + "/admin/sessions", headers=admin).json()["session_id"]
            answer = httpx.post(base_url + "/chat/completions", headers={"Authorization": f"Bearer {session_id}"},
                                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "Hello there"
            finished = httpx.post(base_url.removesuffix("/v1") + f"/admin/sessions/{session_id}/finish", headers=admin)
            (trace,) = finished.json()["traces"]
            assert trace["token_ids"][trace["prompt_length"]:] == reply
    # a non-streamed chat completion is one JSON request to the engine, not a stream
    assert seen[0][0] == session_id and seen[0][1]["stream"] is False


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


def test_session_limit_flags_reach_the_gateway(tiny_model_dir, monkeypatch):
    """`agentcore-rl gateway --max-turns 1 --idle-ttl-s none`: the limits the server enforces."""
    import openai

    from agentcore_rl_harness import cli
    from agentcore_rl_harness import standalone_gateway as standalone
    from agentcore_rl_harness.records import SessionLimits

    seen = {}
    monkeypatch.setattr(standalone, "run_standalone", lambda **kwargs: seen.update(kwargs))
    assert cli.main(["gateway", "--model", str(tiny_model_dir), "--max-turns", "1", "--idle-ttl-s", "none",
                     "--context-budget-tokens", "4096"]) == 0
    assert seen["limits"] == SessionLimits(max_turns=1, idle_ttl_s=None, context_budget_tokens=4096)
    monkeypatch.undo()
    with _standalone(model=str(tiny_model_dir), limits=seen["limits"]) as base_url:
        opened = httpx.post(base_url.removesuffix("/v1") + "/admin/sessions", headers={"X-Admin-Token": "t0ken"},
                            json={"sampling": {"max_tokens": 3}})
        client = openai.OpenAI(base_url=base_url, api_key=opened.json()["session_id"], max_retries=0)
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError, match="limit of 1 turns"):
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])


def test_bad_limit_flag_is_a_usage_error(capsys):
    from agentcore_rl_harness import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["gateway", "--idle-ttl-s", "-5"])
    assert exited.value.code == 2
    assert "--idle-ttl-s wants a positive float or 'none', got '-5'" in capsys.readouterr().err


def test_public_host_keeps_admin_on_loopback_and_knows_the_context(tiny_model_dir, monkeypatch):
    """`--host 0.0.0.0`: the admin API is printed and served on 127.0.0.1 only; the model's
    context (config.json, 8192 for tiny) makes an over-long prompt a 400; TLS flags reach it."""
    from agentcore_rl_harness import cli
    from agentcore_rl_harness import standalone_gateway as standalone

    seen = {}
    monkeypatch.setattr(standalone, "run_standalone", lambda **kwargs: seen.update(kwargs))
    assert cli.main(["gateway", "--model", "tiny", "--tls-certfile", "c.pem", "--tls-keyfile", "k.pem"]) == 0
    assert (seen["tls_certfile"], seen["tls_keyfile"]) == ("c.pem", "k.pem")
    monkeypatch.undo()
    out, stop = io.StringIO(), threading.Event()
    thread = threading.Thread(target=run_standalone, kwargs=dict(
        model=str(tiny_model_dir), host="0.0.0.0", admin_token="t0ken", out=out, stop_event=stop))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while "admin API: " not in out.getvalue():
            assert thread.is_alive() and time.monotonic() < deadline, out.getvalue()
            time.sleep(0.05)
        public = out.getvalue().split("gateway: ")[1].split()[0].replace("0.0.0.0", "127.0.0.1")
        admin = out.getvalue().split("admin API: ")[1].split()[0]
        assert admin.startswith("http://127.0.0.1:") and admin != public.removesuffix("/v1")
        headers = {"X-Admin-Token": "t0ken"}
        assert httpx.post(public.removesuffix("/v1") + "/admin/sessions", headers=headers).status_code == 404
        session_id = httpx.post(admin + "/admin/sessions", headers=headers).json()["session_id"]
        long = httpx.post(public + "/chat/completions", headers={"Authorization": f"Bearer {session_id}"}, timeout=60,
                          json={"model": "tiny", "messages": [{"role": "user", "content": "word " * 9000}]})
        assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
    finally:
        stop.set()
        thread.join(timeout=30)
