"""The run's tokenizer, found on this machine or not at all: it turns a trace's token ids into
text for report.html, report.md and the viewer (transcripts, token view).

The tokenizer is the one the run's config names (`model.name`: a prepared named model or a local
HF folder), or the user's `--tokenizer`. Nothing here prepares or downloads a model: without a
local tokenizer `Tokenizer.path` is None, ids show as numbers and `note` says how to get text.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

@dataclass(frozen=True)
class Tokenizer:
    """Decodes ids, or says why it cannot (`path` None and `note` set)."""

    path: Path | None
    note: str

    @property
    def found(self) -> bool:
        return self.path is not None

    def decode(self, token_ids: Sequence[int]) -> str:
        if self.path is None:
            return " ".join(str(token) for token in token_ids)
        loaded = _load(str(self.path))
        with loaded.lock:
            return loaded.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def pieces(self, token_ids: Sequence[int]) -> list[str]:
        """The text of each token on its own (a byte-level piece of a character shows as �)."""
        if self.path is None:
            return [str(token) for token in token_ids]
        loaded = _load(str(self.path))
        with loaded.lock:
            return [loaded.piece(token) for token in token_ids]

    def marker(self, text: str) -> int | None:
        if self.path is None:
            return None
        loaded = _load(str(self.path))
        with loaded.lock:
            token = loaded.tokenizer.convert_tokens_to_ids(text)
            unknown = loaded.tokenizer.unk_token_id
        return token if isinstance(token, int) and token != unknown else None


class _Loaded:
    """A tokenizer and the lock its calls take: a fast (Rust) tokenizer used from two threads
    at once raises 'Already borrowed', and the server renders pages on a thread pool."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.lock = threading.Lock()
        self.piece = functools.lru_cache(maxsize=None)(
            lambda token: self.tokenizer.decode([token], skip_special_tokens=False))


_loading = threading.Lock()


def _load(path: str) -> _Loaded:
    with _loading:
        return _cached(path)


@functools.lru_cache(maxsize=4)
def _cached(path: str) -> _Loaded:
    return _Loaded(path)


def find_tokenizer(name: str | None, override: Path | None) -> Tokenizer:
    """The tokenizer to decode a run's traces with, found locally or not at all."""
    if override is not None:
        if not (Path(override) / "tokenizer_config.json").is_file():
            return Tokenizer(None, f"--tokenizer {override} has no tokenizer_config.json; "
                                   "showing token ids")
        return Tokenizer(Path(override), "")
    if not name:
        return Tokenizer(None, "the run's config.yaml names no model; pass --tokenizer DIR "
                               "to see token text")
    from ..models import MODEL_NAMES, is_prepared, model_dir

    if name in MODEL_NAMES:
        if is_prepared(name):
            return Tokenizer(model_dir(name), "")
        return Tokenizer(None, f"model {name!r} is not prepared here; run `agentcore-rl "
                               f"models prepare {name}` (or pass --tokenizer DIR) to see text")
    folder = Path(name).expanduser()
    if (folder / "tokenizer_config.json").is_file():
        return Tokenizer(folder, "")
    return Tokenizer(None, f"model {name!r} is not a local folder with a tokenizer; pass "
                           "--tokenizer DIR to see token text")


def model_name(config: dict[str, Any]) -> str | None:
    """The model a run's config names (`model.name`, or a bare `model:` string), if any."""
    model = config.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    return str(name) if name else None


def run_tokenizer(config: dict[str, Any]) -> Path | None:
    """The run's own tokenizer folder, when it is on this machine (else None)."""
    return find_tokenizer(model_name(config), None).path
