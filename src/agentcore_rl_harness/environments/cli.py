"""`agentcore-rl env build|list|dockerfile`: build a task environment into the cache, list the
built ones, write the Dockerfile that deploys an agent in the same environment to ACR."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import HarnessError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentcore-rl env", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="env_command", required=True, metavar="COMMAND")
    build = commands.add_parser("build", help="build an environment into the cache (once; cached by content hash)")
    build.add_argument("spec", type=Path, help="a spec file (YAML), a rootfs directory or a tarball")
    build.add_argument("--force", action="store_true", help="rebuild even if it is cached")
    commands.add_parser("list", help="list the built environments")
    docker = commands.add_parser("dockerfile", help="print the Dockerfile of an environment plus an agent")
    docker.add_argument("spec", type=Path, help="the environment's spec file")
    docker.add_argument("--agent", type=Path, required=True, help="the agent's file (its BedrockAgentCoreApp)")
    docker.add_argument("--context", type=Path, default=Path("."), help="the docker build context (default: .)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .building import build, envs_dir, find_built
    from .dockerfile import render_dockerfile
    from .spec import load_spec

    try:
        if args.env_command == "build":
            spec = load_spec(args.spec)
            cached = not args.force and not spec.in_place and find_built(spec) is not None
            built = build(spec, force=args.force)
            size = f"{built.size_bytes / 1e6:.0f} MB" if built.size_bytes is not None else "in place"
            took = f"built in {built.build_s:.0f} s" if built.build_s is not None else "ready"
            took = f"cached ({took})" if cached else took
            print(f"{built.spec.name}: {took}, {size}: {built.root}")
        elif args.env_command == "list":
            for manifest in sorted(envs_dir().glob("*/manifest.json")):
                info = json.loads(manifest.read_text())
                print(f"{manifest.parent.name}\t{info['size_bytes'] / 1e6:.0f} MB\t{info['build_s']} s\t"
                      f"python {info['python']}\t{info['source']}")
        else:
            if not args.agent.is_file():
                raise HarnessError(f"--agent {args.agent}: no such file; give the agent's .py file")
            sys.stdout.write(render_dockerfile(load_spec(args.spec), agent=args.agent, context=args.context))
    except HarnessError as exc:
        print(f"agentcore-rl env: error: {exc}", file=sys.stderr)
        return 2
    return 0
