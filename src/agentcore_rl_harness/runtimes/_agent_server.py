"""Child side of the `local` runtime: load one ACR app and serve it on a loopback port.

Run as `python -m agentcore_rl_harness.runtimes._agent_server --agent SPEC` (or by file path,
which the parent does so the child never imports the harness package). SPEC is `path/to/file.py`,
`path/to/file.py:attr`, or `module:attr`.

Protocol with the parent: exactly one JSON line on the original stdout, either
`{"port": N, "pid": P}` once the socket listens (`{"unix": PATH, "pid": P}` with `--unix PATH`,
which isolated sessions use: a unix socket in the session's own directory, which no other session
can reach), or `{"error": "..."}` if the agent cannot be loaded (exit code 3). Everything the agent prints goes to stderr, so a chatty agent can never
fill the parent's pipe. Imports nothing of ours: the agent's dependencies are the only ones.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

LOAD_FAILED_EXIT_CODE = 3


class AgentLoadError(Exception):
    """The agent spec does not name an importable BedrockAgentCoreApp."""


def _split_spec(spec: str) -> tuple[str, str | None]:
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head:
        return head, tail
    return spec, None


def _import_file(path: Path) -> Any:
    module_name = path.stem if path.stem.isidentifier() else "agent_module"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise AgentLoadError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_app(spec: str) -> Any:
    """Import the agent named by `spec` and return its BedrockAgentCoreApp instance."""
    from bedrock_agentcore import BedrockAgentCoreApp

    target, attr = _split_spec(spec)
    if target.endswith(".py") or os.sep in target or Path(target).is_file():
        path = Path(target).resolve()
        if not path.is_file():
            raise AgentLoadError(f"agent file not found: {path}")
        module = _import_file(path)
    else:
        module = importlib.import_module(target)

    if attr is not None:
        app = getattr(module, attr, None)
        if not isinstance(app, BedrockAgentCoreApp):
            raise AgentLoadError(
                f"{spec}: attribute {attr!r} is {type(app).__name__}, not a BedrockAgentCoreApp"
            )
        return app
    if isinstance(getattr(module, "app", None), BedrockAgentCoreApp):
        return module.app
    found = {name: v for name, v in vars(module).items() if isinstance(v, BedrockAgentCoreApp)}
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise AgentLoadError(
            f"{spec}: no BedrockAgentCoreApp instance found; define `app = BedrockAgentCoreApp()`"
        )
    raise AgentLoadError(
        f"{spec}: several BedrockAgentCoreApp instances ({', '.join(sorted(found))}); "
        f"name one as `{target}:NAME`"
    )


def load_error_message(exc: BaseException) -> str:
    """Print the traceback of a failed `load_app` to stderr; return the one-line reason."""
    traceback.print_exc()
    return str(exc) if isinstance(exc, AgentLoadError) else f"{type(exc).__name__}: {exc}"


def _announce(ready_fd: int, message: dict[str, Any]) -> None:
    with os.fdopen(ready_fd, "w", encoding="utf-8") as ready:
        ready.write(json.dumps(message) + "\n")


def exit_with_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Kill this session's process group once `parent_pid` is gone (even by SIGKILL)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def bind_loopback() -> socket.socket:
    """A listening 127.0.0.1 socket on a free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else ~40 ms per response
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def bind_unix(path: str) -> socket.socket:
    """A listening unix socket at `path` (readable and writable by its owner only)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old_umask)
    sock.listen(128)
    return sock


def server_config(app: Any) -> Any:
    """The uvicorn config every session serves with (loaded: protocol modules imported)."""
    import uvicorn

    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="auto", timeout_graceful_shutdown=1
    )
    config.load()
    return config


def serve(config: Any, sock: socket.socket) -> None:
    import uvicorn

    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", required=True, help="path/to/agent.py[:attr] or module:attr")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when it exits")
    parser.add_argument("--unix", default=None, help="serve on this unix socket, not loopback TCP")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        exit_with_parent(args.parent_pid)

    # Keep the original stdout for the one ready line; route all other output to stderr.
    sys.stdout.flush()
    ready_fd = os.dup(1)
    os.dup2(2, 1)

    try:
        app = load_app(args.agent)
    except BaseException as exc:  # the agent's own code: report any failure, including SystemExit
        _announce(ready_fd, {"error": load_error_message(exc)})
        return LOAD_FAILED_EXIT_CODE

    config = server_config(app)
    if args.unix:
        sock = bind_unix(args.unix)
        _announce(ready_fd, {"unix": args.unix, "pid": os.getpid()})
    else:
        sock = bind_loopback()
        _announce(ready_fd, {"port": sock.getsockname()[1], "pid": os.getpid()})
    serve(config, sock)
    return 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # run by path: keep sibling modules (base.py, local.py) off the agent's path
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip joining the agent's worker threads (a hung sync handler would block exit forever).
    os._exit(code)
