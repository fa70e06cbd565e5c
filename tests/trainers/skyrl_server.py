"""Start SkyRL 0.3.0's Tinker API server from a plain venv (run with that venv's python).

`python -m skyrl.tinker.api` insists on being launched by `uv run` inside a SkyRL checkout: its
startup reads the parent process's `uv run` flags and spawns the engine as
`uv run ... -m skyrl.tinker.engine`. Here the engine is this script again (`--engine`, same
interpreter); the rest is the module's own `__main__` (same arguments: --base-model, --backend,
--port, ...).

skyrl 0.3.0 says it needs Python >= 3.11, but `skyrl.tinker.types` builds a pydantic model on a
`typing.TypedDict`, which pydantic refuses before Python 3.12; on 3.11 the import is pointed at
`typing_extensions.TypedDict` (what pydantic asks for) before SkyRL is imported.
"""

import argparse
import runpy
import sys
import typing

import typing_extensions

if sys.version_info < (3, 12):
    typing.TypedDict = typing_extensions.TypedDict

import uvicorn  # noqa: E402
from skyrl.tinker import api  # noqa: E402
from skyrl.tinker.config import EngineConfig, add_model, config_to_argv  # noqa: E402
from skyrl.utils.log import get_uvicorn_log_config  # noqa: E402


def engine_command(parent_cmd: list[str], engine_config: EngineConfig) -> list[str]:
    return [sys.executable, __file__, "--engine", *config_to_argv(engine_config)]


def main() -> None:
    if sys.argv[1:2] == ["--engine"]:
        del sys.argv[1]
        runpy.run_module("skyrl.tinker.engine", run_name="__main__", alter_sys=True)
        return
    parser = argparse.ArgumentParser(description="SkyRL tinker API server without uv")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    api._build_uv_run_cmd_engine = engine_command
    api.app.state.engine_config = EngineConfig.model_validate(
        {key: value for key, value in vars(args).items() if key in EngineConfig.model_fields})
    uvicorn.run(api.app, host=args.host, port=args.port, log_config=get_uvicorn_log_config())


if __name__ == "__main__":
    main()
