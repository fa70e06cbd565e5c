"""`agentcore-rl view [RUN_DIR ...]`: its arguments (cli.py hands `view` over to this module)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import HarnessError
from .links import DEFAULT_HOST, DEFAULT_PORT
from .serve import ViewSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcore-rl view",
        description="Browse run directories: rollouts, transcripts, token views; live while a "
                    "run goes. Reads the directories in place.")
    parser.add_argument("paths", nargs="*", type=Path, metavar="RUN_DIR",
                        help="run directories, or folders of them (default: outputs/ if present, "
                             "else .)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to bind (default {DEFAULT_HOST}); others need --token")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT}, the one report.html links to; 0: any)")
    parser.add_argument("--token", default=None,
                        help="require this token (in the URL, ?token=...); 'auto' makes one")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="HF tokenizer folder (default: the run's model, if prepared here)")
    parser.add_argument("--bundle", type=Path, default=None, metavar="OUT",
                        help="write the pages as a static folder OUT instead of serving")
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    paths = args.paths or [Path("outputs") if Path("outputs").is_dir() else Path(".")]
    try:
        settings = ViewSettings(paths=tuple(paths), host=args.host, port=args.port,
                                token=args.token, tokenizer=args.tokenizer)
        if args.bundle is not None:
            from .bundle import write_bundle
            from .runs import Catalog

            page = write_bundle(Catalog(list(settings.paths)), args.bundle,
                                tokenizer=settings.tokenizer, progress=print)
            print(f"agentcore-rl view: wrote {page}")
            return 0
        from .serve import serve

        serve(settings)
        return 0
    except HarnessError as exc:
        print(f"agentcore-rl view: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
