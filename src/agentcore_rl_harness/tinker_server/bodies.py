"""JSON request bodies -> validated specs (`BadRequest` naming the field otherwise)."""

from __future__ import annotations

from typing import Any

from .checkpoints import LoraSpec
from .engine import Engine
from .errors import BadRequest
from .generate import SampleSpec


def required_int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{key} must be an integer, got {value!r}")
    return value


def lora_spec(lora: dict[str, Any]) -> LoraSpec:
    try:
        return LoraSpec(rank=int(lora["rank"]), seed=lora.get("seed"),
                        train_mlp=bool(lora.get("train_mlp", True)), train_attn=bool(lora.get("train_attn", True)),
                        train_unembed=bool(lora.get("train_unembed", True)))
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad lora_config {lora}: {exc}") from exc


def sample_spec(body: dict[str, Any], engine: Engine) -> SampleSpec:
    for unsupported in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
        if body.get(unsupported):
            raise BadRequest(f"{unsupported} is not implemented by agentcore-rl tinker-server")
    if body.get("target_prompt_logprobs") is not None or body.get("prompt_logprobs_last_n") is not None:
        raise BadRequest("target_prompt_logprobs / prompt_logprobs_last_n are not implemented here")
    prompt: list[int] = []
    for chunk in (body.get("prompt") or {}).get("chunks") or []:
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise BadRequest(f"prompt chunk type {chunk.get('type')!r} is not supported; send token chunks")
        prompt.extend(int(token) for token in chunk.get("tokens", []))
    if not prompt:
        raise BadRequest("the prompt has no tokens")
    vocab = engine.base.get_output_embeddings().weight.shape[0]
    if min(prompt) < 0 or max(prompt) >= vocab:
        raise BadRequest(f"prompt token ids must be in [0, {vocab})")
    params = body.get("sampling_params") or {}
    limit = engine.context_length or 10**9
    max_tokens = params.get("max_tokens")
    max_tokens = min(256, limit - len(prompt)) if max_tokens is None else int(max_tokens)
    if max_tokens < 1 or len(prompt) + max_tokens > limit:
        raise BadRequest(f"max_tokens {max_tokens} with a {len(prompt)}-token prompt does not fit the "
                         f"model's {limit} positions")
    num_samples = int(body.get("num_samples", 1))
    if not 1 <= num_samples <= 256:
        raise BadRequest(f"num_samples must be in [1, 256], got {num_samples}")
    stop = params.get("stop")
    stop_ids: set[int] = set()
    stop_strings: tuple[str, ...] = ()
    if stop is None:
        eos = engine.tokenizer.eos_token_id
        stop_ids = {eos} if eos is not None else set()
    elif isinstance(stop, str):
        stop_strings = (stop,)
    elif all(isinstance(item, int) for item in stop):
        stop_ids = set(stop)
    elif all(isinstance(item, str) for item in stop):
        stop_strings = tuple(stop)
    else:
        raise BadRequest(f"stop must be a string, a list of strings or a list of token ids, got {stop!r}")
    temperature = float(params.get("temperature", 1.0))
    top_p = float(params.get("top_p", 1.0))
    top_k = int(params.get("top_k", -1))
    if temperature < 0 or not 0 < top_p <= 1:
        raise BadRequest(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    return SampleSpec(prompt=tuple(prompt), num_samples=num_samples, max_tokens=max_tokens,
                      temperature=temperature, top_k=max(top_k, 0), top_p=top_p, seed=params.get("seed"),
                      stop_token_ids=frozenset(stop_ids), stop_strings=stop_strings,
                      prompt_logprobs=bool(body.get("prompt_logprobs")))
