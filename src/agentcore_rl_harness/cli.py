"""The `agentcore-rl` console script: models, gateway, report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import HarnessError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcore-rl", description="RL and evaluation harness for AgentCore agents"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    models = commands.add_parser("models", help="prepare or list local models")
    model_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = model_commands.add_parser("prepare", help="build or convert a named model")
    prepare.add_argument("name", help="tiny or smollm2-135m-instruct")
    prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    model_commands.add_parser("list", help="list named models and where they are cached")

    gateway = commands.add_parser("gateway", help="run the rollout gateway as a server")
    gateway.add_argument("--model", default="smollm2-135m-instruct", help="name or HF folder")
    gateway.add_argument("--sampler", default="hf", choices=["hf", "vllm", "sglang", "tinker"])
    gateway.add_argument("--sampler-url", default=None)
    gateway.add_argument("--host", default="127.0.0.1")
    gateway.add_argument("--port", type=int, default=0)
    gateway.add_argument("--admin-token", default=None)

    report = commands.add_parser("report", help="re-render reports from rollouts.jsonl")
    report.add_argument("run_dir", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "models":
            return _models(args)
        if args.command == "gateway":
            from .gateway.standalone import run_standalone

            run_standalone(
                model=args.model,
                sampler=args.sampler,
                sampler_url=args.sampler_url,
                host=args.host,
                port=args.port,
                admin_token=args.admin_token,
            )
            return 0
        if args.command == "report":
            return _report(args.run_dir)
    except HarnessError as exc:
        print(f"agentcore-rl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _models(args: argparse.Namespace) -> int:
    from .models import list_models, prepare_model

    if args.models_command == "prepare":
        path = prepare_model(args.name, force=args.force, progress=print)
        print(path)
        return 0
    for name, path, prepared in list_models():
        print(f"{name}\t{'prepared' if prepared else 'not prepared'}\t{path or ''}")
    return 0


def _report(run_dir: Path) -> int:
    """Rebuild report.json/md and junit.xml from rollouts.jsonl and the existing report's run."""
    from .reports.build import build_report
    from .reports.model import Report
    from .reports.render import verdict, write_reports
    from .session import ITEM_PHASE
    from .store import read_rollouts
    from .training import read_steps

    rollouts = read_rollouts(run_dir)
    existing = run_dir / "report.json"
    if not existing.is_file():
        raise HarnessError(f"{existing} is missing: cannot recover the run's metadata")
    run = Report.model_validate_json(existing.read_text(encoding="utf-8")).run
    report = build_report(
        run_id=run.id, mode=run.mode, config=run.config, overrides=run.overrides,
        versions=run.versions, git_sha=run.git_sha, started_at=run.started_at,
        wall_time_s=run.wall_time_s, rollouts=rollouts, item_phase=ITEM_PHASE[run.mode],
        train_steps=read_steps(run_dir),
    )
    write_reports(run_dir, report, rollouts)
    print(f"{run_dir}: {verdict(report.overall)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
