"""Usage per model role for the report: the policy's tokens (from the rollouts) and each judge
question's line in `RUN_DIR/judge/usage.jsonl` (`service.py`), with cost where priced."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..store import read_json_lines
from .service import USAGE_FILE

JUDGE_DIR = "judge"


def judge_lines(run_dir: Path) -> list[dict[str, Any]]:
    return read_json_lines(Path(run_dir) / JUDGE_DIR / USAGE_FILE)


def _price_cost(config: Mapping[str, Any], role: str, prompt: int, completion: int) -> float | None:
    price = ((config.get("roles") or {}).get(role) or {}).get("price") or {}
    per_prompt, per_completion = price.get("prompt_per_mtok"), price.get("completion_per_mtok")
    if per_prompt is None and per_completion is None:
        return None
    return ((per_prompt or 0.0) * prompt + (per_completion or 0.0) * completion) / 1e6


def role_usage(run_dir: Path | None, rollouts: Sequence[Any], config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """role -> {calls, cached, failed_attempts, judge_errors, prompt_tokens, completion_tokens, cost_usd}."""
    prompt = sum(r.usage.prompt_tokens for r in rollouts)
    completion = sum(r.usage.completion_tokens for r in rollouts)
    roles = {"policy": {"calls": sum(r.turns for r in rollouts), "cached": 0, "failed_attempts": 0,
                        "judge_errors": 0, "prompt_tokens": prompt, "completion_tokens": completion,
                        "cost_usd": _price_cost(config, "policy", prompt, completion)}}
    for line in judge_lines(run_dir) if run_dir is not None else []:
        role = roles.setdefault(line.get("role", "judge"), {
            "calls": 0, "cached": 0, "failed_attempts": 0, "judge_errors": 0, "prompt_tokens": 0,
            "completion_tokens": 0, "cost_usd": None})
        role["calls"] += int(line.get("attempts", 0))
        role["cached"] += int(bool(line.get("cached")))
        role["failed_attempts"] += int(line.get("failed_attempts", 0))
        role["judge_errors"] += int(not line.get("ok", True))
        role["prompt_tokens"] += int(line.get("prompt_tokens", 0))
        role["completion_tokens"] += int(line.get("completion_tokens", 0))
        if line.get("cost_usd") is not None:
            role["cost_usd"] = (role["cost_usd"] or 0.0) + float(line["cost_usd"])
    return roles
