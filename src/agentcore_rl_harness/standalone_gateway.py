"""`run_standalone`: the gateway as a standalone server for external trainers (`agentcore-rl gateway`).

`--model` gives the tokenizer and chat template (and, for the in-process `hf` sampler, the
weights). The remote samplers take their endpoint from `--sampler-url`: vLLM's and SGLang's server
root, or the Tinker service (default: the SDK's, e.g. `TINKER_BASE_URL`); `--sampler-model` names
what the engine serves (vLLM's `model` field; Tinker's base model or a `tinker://` checkpoint,
default `--model`). `limits` are the session limits (`--max-turns`, `--idle-ttl-s`,
`--max-lifetime-s`, `--context-budget-tokens`).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, TextIO

from .errors import ConfigError
from .records import SessionLimits
from .gateway.rendering import ChatTemplateRenderer
from .gateway.config import GatewayConfig, GatewayTLS
from .gateway.sampling import SamplingBackend
from .gateway.server import GatewayServer
from .records import HistoryMode

SAMPLERS = ("hf", "vllm", "sglang", "tinker")


def run_standalone(
    *, model: str, sampler: str = "hf", sampler_url: str | None = None, sampler_model: str | None = None,
    host: str = "127.0.0.1", port: int = 0, admin_token: str | None = None, history: str = "exact",
    gc_freeze: bool = False, limits: SessionLimits = SessionLimits(), out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None, tls_certfile: str | None = None,
    tls_keyfile: str | None = None,
) -> None:
    """Load `model` (a known name or a local HF folder), serve, print the base URL (and the
    admin API's loopback URL when `host` is not loopback), block until Ctrl-C (or `stop_event`
    is set). A prompt longer than the model's context (its config.json) is a 400."""
    _check_options(sampler, sampler_url, history)
    try:
        limits.check()
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    from .models import context_window, load_tokenizer, resolve_model

    path = resolve_model(model)
    renderer = ChatTemplateRenderer(load_tokenizer(path))
    backend = build_sampler(sampler, model_path=path, sampler_url=sampler_url,
                            sampler_model=sampler_model or (None if sampler == "vllm" else str(model)))
    config = GatewayConfig(host=host, port=port, history=history, gc_freeze=gc_freeze,
                           max_turns=limits.max_turns, context_budget_tokens=limits.context_budget_tokens,
                           idle_ttl_s=limits.idle_ttl_s, max_lifetime_s=limits.max_lifetime_s,
                           tls=GatewayTLS(certfile=tls_certfile, keyfile=tls_keyfile))
    server = GatewayServer(sampler=backend, renderer=renderer, model_id=str(model), config=config,
                           context_window_tokens=context_window(path), admin_token=admin_token)
    stop_event = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started as a background job, SIGINT comes in ignored: the gateway still stops on Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with server:
            print(f"gateway: {server.base_url}", file=out, flush=True)
            if server.admin_url != server.base_url.removesuffix("/v1"):
                print(f"admin API: {server.admin_url} (loopback only)", file=out, flush=True)
            if admin_token is None:
                print(f"admin token: {server.admin_token}", file=out, flush=True)
            try:
                while not stop_event.wait(0.5):
                    pass
            except KeyboardInterrupt:
                print("gateway: stopping", file=out, flush=True)
    finally:
        backend.close()


def _check_options(sampler: str, sampler_url: str | None, history: str) -> None:
    if sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    HistoryMode.parse(history, key="--history")
    if sampler == "hf" and sampler_url is not None:
        raise ConfigError("--sampler-url applies to remote samplers only; the hf sampler is in-process")
    if sampler in ("vllm", "sglang") and not sampler_url:
        raise ConfigError(f"--sampler {sampler} needs --sampler-url, the {sampler} server's root URL "
                          "(e.g. http://127.0.0.1:8000)")


def build_sampler(kind: str, *, model_path: Any, sampler_url: str | None, sampler_model: str | None) -> SamplingBackend:
    """The `SamplingBackend` a `--sampler` choice names (imports only what that choice needs)."""
    if kind == "hf":
        from .models import load_model
        from .samplers.hf_local import HFLocalSampler

        return HFLocalSampler(load_model(model_path))
    if kind == "vllm":
        from .samplers.vllm import VLLMSampler

        return VLLMSampler(sampler_url, model=sampler_model)
    if kind == "sglang":
        from .samplers.sglang import SGLangSampler

        return SGLangSampler(sampler_url)
    from .samplers.tinker import TinkerSampler, import_tinker

    service = import_tinker().ServiceClient(**({"base_url": sampler_url} if sampler_url else {}))
    if sampler_model.startswith("tinker://"):
        return TinkerSampler(service.create_sampling_client(model_path=sampler_model))
    return TinkerSampler(service.create_sampling_client(base_model=sampler_model))
