"""The `agentcore-rl` console script: init, models, gateway, report, rescore, sweep, view, env."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import HarnessError
from .records import HISTORY_MODES, SessionLimits


def _limit(kind: type, flag: str) -> Callable[[str], Any]:
    """argparse type of a session limit: a positive number, or `none` for no limit."""
    def parse(text: str) -> Any:
        if text.lower() in ("none", "null"):
            return None
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(
                f"{flag} wants a positive {kind.__name__} or 'none', got {text!r}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcore-rl", description="RL and evaluation harness for AgentCore agents"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser(
        "init", help="make a new task project (agent, task, rows, rewards, oracle, config) in DIR")
    init.add_argument("directory", type=Path, metavar="DIR", help="a new or empty directory")
    init.add_argument("--framework", default="openai", choices=["openai", "langgraph", "strands"],
                      help="how the agent reaches its model (default: openai, the plain SDK)")
    init.add_argument("--force", action="store_true", help="write into DIR even if it is not empty")

    models = commands.add_parser("models", help="prepare or list local models")
    model_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = model_commands.add_parser("prepare", help="build or convert a named model")
    prepare.add_argument("name", help="tiny or smollm2-135m-instruct")
    prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    model_commands.add_parser("list", help="list named models and where they are cached")

    gateway = commands.add_parser("gateway", help="run the rollout gateway as a server")
    gateway.add_argument("--model", default="smollm2-135m-instruct",
                         help="a named model or an HF folder: the tokenizer and chat template, and the "
                              "weights when --sampler hf (default: %(default)s)")
    gateway.add_argument("--sampler", default="hf", choices=["hf", "vllm", "sglang", "tinker"],
                         help="what samples the tokens: hf (in this process) or an engine at --sampler-url "
                              "(default: %(default)s)")
    gateway.add_argument("--sampler-url", default=None,
                         help="the base URL of the vllm / sglang / tinker server (not for --sampler hf)")
    gateway.add_argument("--host", default="127.0.0.1",
                         help="the address to listen on (default: %(default)s, loopback only)")
    gateway.add_argument("--port", type=int, default=0, help="the port to listen on; 0 picks a free one")
    gateway.add_argument("--admin-token", default=None,
                         help="the X-Admin-Token the admin API (/admin/sessions) requires "
                              "(default: a random one, printed at start)")
    gateway.add_argument("--sampler-model", default=None,
                         help="what the engine serves: vLLM's model name; Tinker's base model or tinker:// path (default: --model)")
    gateway.add_argument("--history", default="exact", choices=HISTORY_MODES,
                         help="a turn's prompt from the sampled ids (exact) or the template's re-rendering")
    gateway.add_argument("--gc-freeze", action="store_true", help="gc.freeze() once the model is loaded")
    gateway.add_argument("--tls-certfile", default=None, help="serve HTTPS with this PEM certificate")
    gateway.add_argument("--tls-keyfile", default=None, help="the PEM private key of --tls-certfile")
    limits = SessionLimits()
    for flag, kind, what in (
        ("--max-turns", int, "model requests per session"),
        ("--idle-ttl-s", float, "seconds without a request after which a session expires"),
        ("--max-lifetime-s", float, "seconds after opening at which a session expires"),
        ("--context-budget-tokens", int, "prompt + reply tokens per turn"),
    ):
        name = flag[2:].replace("-", "_")
        gateway.add_argument(flag, type=_limit(kind, flag), default=getattr(limits, name), metavar="N|none",
                             help=f"{what}; none = unlimited (default: {getattr(limits, name)})")

    report = commands.add_parser(
        "report", help="re-render reports from rollouts.jsonl, or `report compare A B`",
        usage="agentcore-rl report RUN_DIR [--tokenizer DIR]\n"
              "       agentcore-rl report compare A B [--out DIR]",
    )
    report.add_argument("target", nargs="+", metavar="RUN_DIR | compare A B",
                        help="a run directory to re-render, or `compare` and two run directories")
    report.add_argument("--tokenizer", type=Path, default=None,
                        help="HF tokenizer folder for transcripts and token text (default: the run's own "
                             "model, when it is on this machine)")
    report.add_argument("--out", type=Path, default=None,
                        help="compare: where compare.json/md go (default: B's directory)")

    rescore = commands.add_parser(
        "rescore", help="score recorded rollouts again with the tasks as they are now (no agents run)")
    rescore.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory whose rollouts to score")
    rescore.add_argument("--tasks", type=Path, default=None, metavar="PATH",
                         help="the tasks' folder or test file (default: tasks/ if present, else .)")

    commands.add_parser(
        "sweep", add_help=False,
        help="Hydra app: one pytest session per job (`agentcore-rl sweep --help`)",
    )
    commands.add_parser(  # parsed in tinker_server/cli.py
        "tinker-server", add_help=False,
        help="serve a Tinker-compatible API on a local model (`agentcore-rl tinker-server --help`)",
    )
    commands.add_parser(  # parsed in integrations/export.py
        "export", add_help=False,
        help="write a task's rows as verl / slime training data (`agentcore-rl export --help`)",
    )
    commands.add_parser(  # parsed in environments/cli.py
        "env", help="build, list or write the Dockerfile of task environments (root filesystems)")
    commands.add_parser(  # parsed in viewer/cli.py
        "view", add_help=False,
        help="browse run directories in a local web viewer (`agentcore-rl view --help`)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:  # Hydra parses its own arguments
        from .sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] == ["tinker-server"]:
        from .tinker_server.cli import main as tinker_server_main

        return tinker_server_main(argv[1:])
    if argv[:1] == ["export"]:
        from .integrations.export import main as export_main

        return export_main(argv[1:])
    if argv[:1] == ["env"]:
        from .environments.cli import main as env_main

        return env_main(argv[1:])
    if argv[:1] == ["view"]:
        from .viewer.cli import main as view_main

        return view_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        if args.command == "init":
            return _init(args.directory, args.framework, force=args.force)
        if args.command == "models":
            return _models(args)
        if args.command == "gateway":
            from .standalone_gateway import run_standalone

            run_standalone(
                model=args.model,
                sampler=args.sampler,
                sampler_url=args.sampler_url,
                host=args.host,
                port=args.port,
                admin_token=args.admin_token,
                sampler_model=args.sampler_model,
                history=args.history,
                gc_freeze=args.gc_freeze,
                tls_certfile=args.tls_certfile,
                tls_keyfile=args.tls_keyfile,
                limits=SessionLimits(max_turns=args.max_turns, idle_ttl_s=args.idle_ttl_s,
                                     max_lifetime_s=args.max_lifetime_s,
                                     context_budget_tokens=args.context_budget_tokens),
            )
            return 0
        if args.command == "rescore":
            return _rescore(args.run_dir, args.tasks)
        if args.command == "report":
            if args.target[0] == "compare":
                return _compare(args.target[1:], args.out)
            if len(args.target) != 1:
                raise HarnessError(
                    f"report takes one RUN_DIR, got {args.target}; to compare two runs use "
                    "`agentcore-rl report compare A B`"
                )
            return _report(Path(args.target[0]), args.tokenizer)
    except HarnessError as exc:
        print(f"agentcore-rl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _init(directory: Path, framework: str, *, force: bool) -> int:
    from .scaffold import FRAMEWORKS, init_project, missing_modules

    written = init_project(directory, framework=framework, force=force)
    print(f"made a {framework} task project in {directory}:")
    for path in written:
        print(f"  {path.relative_to(directory)}")
    missing = missing_modules(framework)
    if missing:
        print(f"note: this Python cannot import {', '.join(missing)}, which agent.py needs: "
              f"pip install {FRAMEWORKS[framework].pip}")
    print(f"next:\n  cd {directory}\n"
          "  pytest --agentcore-rl eval --agentcore-rl-set agent=oracle   # must be 100% success\n"
          "  pytest --agentcore-rl eval --agentcore-rl-set model=tiny     # the whole path, in seconds\n"
          "  pytest --agentcore-rl run                                    # pre-eval, train, post-eval")
    return 0


def _models(args: argparse.Namespace) -> int:
    from .models import list_models, prepare_model

    if args.models_command == "prepare":
        path = prepare_model(args.name, force=args.force, progress=print)
        print(path)
        return 0
    for name, path, prepared in list_models():
        print(f"{name}\t{'prepared' if prepared else 'not prepared'}\t{path or ''}")
    return 0


def _report(run_dir: Path, tokenizer: Path | None) -> int:
    """Rebuild every report from rollouts.jsonl (+ the run section of report.json, or
    config.yaml and run.json when report.json is missing)."""
    from .reports.load import load_run
    from .reports.render import verdict_line, write_reports

    loaded = load_run(run_dir)
    write_reports(loaded.run_dir, loaded.report, loaded.rollouts, tokenizer=tokenizer)
    print(f"{run_dir}: {verdict_line(loaded.report)}")
    return 0


def _rescore(run_dir: Path, tasks: Path | None) -> int:
    from .integrations._tasks import tasks_under
    from .run.rescore import rescore

    if tasks is None:
        tasks = Path("tasks") if Path("tasks").is_dir() else Path(".")
    if not tasks.exists():
        raise HarnessError(f"--tasks {tasks}: no such file or folder; give the folder (or test file) "
                           "that defines the run's tasks")
    specs, failed = tasks_under(tasks.resolve())
    for message in failed:
        print(f"agentcore-rl rescore: could not import: {message}", file=sys.stderr)
    rescore(run_dir, specs, tasks_label=str(tasks))
    return 0


def _compare(runs: list[str], out: Path | None) -> int:
    from .reports.compare import compare_runs, render_comparison, write_comparison

    if len(runs) != 2:
        raise HarnessError(f"report compare takes two runs A B, got {runs}")
    a, b = (Path(run) for run in runs)
    comparison = compare_runs(a, b)
    text = render_comparison(comparison)
    if out is None:
        out = b if b.is_dir() else b.parent
    json_path, md_path = write_comparison(comparison, out)
    print(text, end="")
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
