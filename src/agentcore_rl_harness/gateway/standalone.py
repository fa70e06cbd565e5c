"""`run_standalone`: the gateway as a standalone server for external trainers (`agentcore-rl gateway`)."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from ..errors import ConfigError
from .rendering import ChatTemplateRenderer
from .server import GatewayConfig, GatewayServer

SAMPLERS = ("hf", "vllm", "sglang", "tinker")


def run_standalone(
    *, model: str, sampler: str = "hf", sampler_url: str | None = None, host: str = "127.0.0.1",
    port: int = 0, admin_token: str | None = None, out: TextIO = sys.stdout,
    stop_event: threading.Event | None = None,
) -> None:
    """Load `model` (a known name or a local HF folder), serve, print the base URL, block until
    Ctrl-C (or `stop_event` is set)."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if sampler != "hf":
        raise ConfigError(
            f"sampler {sampler!r} is not implemented yet in the standalone gateway; use --sampler hf"
        )
    if sampler_url is not None:
        raise ConfigError("--sampler-url applies to remote samplers only; the hf sampler is in-process")
    from ..models import load_model, load_tokenizer, resolve_model
    from ..samplers.hf_local import HFLocalSampler

    path = resolve_model(model)
    renderer = ChatTemplateRenderer(load_tokenizer(path))
    backend = HFLocalSampler(load_model(path))
    server = GatewayServer(sampler=backend, renderer=renderer, model_id=str(model),
                           config=GatewayConfig(host=host, port=port), admin_token=admin_token)
    stop_event = stop_event or threading.Event()
    try:
        with server:
            print(f"gateway: {server.base_url}", file=out, flush=True)
            if admin_token is None:
                print(f"admin token: {server.admin_token}", file=out, flush=True)
            try:
                while not stop_event.wait(0.5):
                    pass
            except KeyboardInterrupt:
                print("gateway: stopping", file=out, flush=True)
    finally:
        backend.close()
