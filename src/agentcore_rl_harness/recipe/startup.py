"""The start-up choices of `recipe=auto`, made before the model loads (pure: inputs in, choices out).

    dtypes      trainer.autocast_dtype / serve_dtype: bf16 only where this machine measures that work faster
    max_tokens  sampling.max_tokens: the oracle's longest turn with a margin (where an oracle exists)
    LoRA        trainer.lora_rank / trainer.lr from the model's parameter count

An explicit key keeps its value; the choice is still recorded (`applied` False) with what the
recipe would have picked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .choices import Choice
from .config import RecipeConfig
from .dtypes import DtypeMeasurement
from .explicit import is_explicit

# (largest parameter count, LoRA rank, learning rate): LoRA's usual scaling, anchored where this
# project measured (SmolLM2-135M: the office lift at lr 3e-4, rank 16).
SIZE_TABLE = ((500e6, 16, 3e-4), (3e9, 16, 2e-4), (10e9, 32, 1e-4), (math.inf, 64, 5e-5))
FULL_FINETUNE_LR_FACTOR = 0.1  # every weight moves: a tenth of LoRA's rate


@dataclass(frozen=True)
class StartupInputs:
    """What the run knows before its model loads."""

    trainer_kind: str
    finetune: str  # lora | full
    serve_merged: bool
    cuda: bool  # the trainer will run on a CUDA device
    cuda_bf16: bool
    parameters: int | None  # the model's parameter count (None: unknown)
    hidden_size: int | None  # the model's width, where the dtype benchmark measures (None: unknown)
    oracle_turn_tokens: Sequence[int]  # token lengths of the oracle's assistant turns on train rows
    oracle_rows: int  # train rows those turns came from
    current: dict[str, Any]  # the config's value of each key a choice may set


def hidden_size(model_dir: Path) -> int | None:
    """The model's hidden size from its config.json, or None."""
    try:
        return int(json.loads((Path(model_dir) / "config.json").read_text())["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parameter_count(model_dir: Path) -> int | None:
    """A decoder's parameter count from its config.json (embeddings, attention, MLP), or None."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        vocab, inner = int(config["vocab_size"]), int(config.get("intermediate_size", 4 * hidden))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    heads = int(config.get("num_attention_heads", 1)) or 1
    kv = hidden * int(config.get("num_key_value_heads", heads)) // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + 3 * hidden * inner)


def _decided(key: str, value: Any, reason: str, inputs: StartupInputs, explicit: frozenset[str]) -> Choice:
    if is_explicit(key, explicit):
        kept = inputs.current.get(key)
        return Choice(key, kept, f"set explicitly (the recipe would choose {value!r}: {reason})", applied=False)
    return Choice(key, value, reason)


def dtype_choices(recipe: RecipeConfig, inputs: StartupInputs, explicit: frozenset[str],
                  measure: Callable[[int | None], DtypeMeasurement]) -> tuple[list[Choice], dict[str, Any]]:
    """(choices, observations) for trainer.autocast_dtype and trainer.serve_dtype: each from the
    speed of its own work (a training step, a decode step) measured at the model's width."""
    if inputs.trainer_kind != "local":
        return [], {}
    observed: dict[str, Any] = {}
    serves = inputs.finetune == "lora" and inputs.serve_merged
    if inputs.cuda:
        train = serve = inputs.cuda_bf16
        train_reason = serve_reason = ("a CUDA device with bf16 support" if train
                                       else "a CUDA device without bf16 support")
    elif inputs.parameters is not None and inputs.parameters < recipe.dtype_min_params:
        train = serve = False
        train_reason = serve_reason = (
            f"the model has ~{inputs.parameters:,} parameters (< recipe.dtype_min_params="
            f"{recipe.dtype_min_params:,}): a step's time is overhead, float32 keeps logprobs exact")
    else:
        measured = measure(inputs.hidden_size)
        observed["dtype_benchmark"] = measured.__dict__ | {"cpu_flags": list(measured.cpu_flags)}
        train = measured.forward_backward_speedup >= recipe.dtype_min_speedup
        serve = measured.serve_speedup >= recipe.dtype_min_speedup

        def said(fast: bool, work: str) -> str:
            verdict = "faster" if fast else f"not {recipe.dtype_min_speedup}x faster"
            return f"bf16 {work} is {verdict} on this CPU: {measured.text()}"

        train_reason, serve_reason = said(train, "training"), said(serve, "serving")
    choices = [_decided("trainer.autocast_dtype", "bfloat16" if train else None, train_reason, inputs, explicit)]
    if serves:
        choices.append(_decided("trainer.serve_dtype", "bfloat16" if serve else None, serve_reason, inputs, explicit))
    return choices, observed


def max_tokens_choice(recipe: RecipeConfig, inputs: StartupInputs, explicit: frozenset[str]) -> list[Choice]:
    if not inputs.oracle_turn_tokens:
        return []
    longest = max(inputs.oracle_turn_tokens)
    value = int(math.ceil(longest * recipe.max_tokens_margin / 16) * 16)
    reason = (f"the oracle's longest turn is {longest} tokens ({len(inputs.oracle_turn_tokens)} turns on "
              f"{inputs.oracle_rows} train rows) x recipe.max_tokens_margin={recipe.max_tokens_margin}, "
              "rounded up to 16")
    return [_decided("sampling.max_tokens", value, reason, inputs, explicit)]


def size_choices(inputs: StartupInputs, explicit: frozenset[str]) -> list[Choice]:
    if inputs.trainer_kind != "local" or inputs.parameters is None:
        return []
    limit, rank, lr = next(row for row in SIZE_TABLE if inputs.parameters <= row[0])
    size = f"the model has ~{inputs.parameters / 1e6:,.1f}M parameters (<= {limit / 1e6:,.0f}M)"
    choices = []
    if inputs.finetune == "lora":
        choices.append(_decided("trainer.lora_rank", rank, size, inputs, explicit))
    else:
        lr *= FULL_FINETUNE_LR_FACTOR
        size += f"; full fine-tuning: x{FULL_FINETUNE_LR_FACTOR} of LoRA's rate"
    choices.append(_decided("trainer.lr", lr, size, inputs, explicit))
    return choices


def startup_choices(recipe: RecipeConfig, inputs: StartupInputs, explicit: frozenset[str],
                    measure: Callable[[int | None], DtypeMeasurement]) -> tuple[list[Choice], dict[str, Any]]:
    dtypes, observed = dtype_choices(recipe, inputs, explicit, measure)
    return [*dtypes, *max_tokens_choice(recipe, inputs, explicit), *size_choices(inputs, explicit)], observed
