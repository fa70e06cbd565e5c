"""`agentcore-rl tinker-server`: arguments and entry point (cli.py only dispatches here)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import HarnessError


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcore-rl tinker-server",
        description="Serve a Tinker-compatible API (LoRA training + sampling) for a local model on CPU; "
                    "prints the base URL for tinker.ServiceClient(base_url=...).",
    )
    parser.add_argument("--model", required=True, help="tiny, smollm2-135m-instruct, or a local HF folder")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require this key (tml-...) in X-API-Key")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="where save_state / save_weights_for_sampler write (default: the harness cache)")
    parser.add_argument("--max-models", type=int, default=4, help="training models held at once")
    parser.add_argument("--session-timeout", type=float, default=120.0,
                        help="free the models of a session silent this many seconds (its client died; "
                             "the SDK heartbeats every 10 s); 0 = never")
    return parser


def main(argv: Sequence[str]) -> int:
    from .server import run_cli

    args = parser().parse_args(list(argv))
    try:
        run_cli(model=args.model, host=args.host, port=args.port, api_key=args.api_key,
                checkpoint_dir=args.checkpoint_dir, max_models=args.max_models,
                session_timeout_s=args.session_timeout or None)
    except HarnessError as exc:
        print(f"agentcore-rl tinker-server: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
