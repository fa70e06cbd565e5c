"""The terminal lines of one training step, at its update's start and end (pure).

A step's update can take minutes on a CPU; the status line is about rollouts, so without these
the terminal shows nothing between a step's last rollout and its result. The start line keeps to
the progress display's `STATUS_WIDTH` (80 columns); the result line is whole unless given a
`width` (then it drops its least useful parts first). Steps are numbered as everything else
numbers them (1 is the first step; see `train_store`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..progress import STATUS_WIDTH, format_duration

# What the result line drops first when it does not fit; the step, reward and checkpoint stay.
RESULT_DROP_ORDER = ("step_time", "groups", "update", "loss", "tokens", "success")


def update_start_line(*, step: int, steps: int, groups_used: int, groups_total: int, tokens: int) -> str:
    """`agentcore-rl train step 3/20: updating on 5/8 groups, 1,234 tokens...`"""
    what = f"updating on {groups_used}/{groups_total} groups, {tokens:,} tokens..."
    if not tokens:
        what = f"nothing to train: {groups_used}/{groups_total} groups informative, 0 tokens"
    return f"agentcore-rl train step {step}/{steps}: {what}"[:STATUS_WIDTH]


def update_result_line(line: Mapping[str, Any], *, steps: int, width: int | None = None) -> str:
    """The step's result from its steps.jsonl line: reward, success, loss, informative groups,
    tokens trained, the update's and the step's seconds, and the checkpoint saved after it."""
    times = line.get("wall_time_s") or {}
    parts = [
        ("reward", f"reward {_number(line.get('reward_mean'))}"),
        ("success", f"success {_percent(line.get('success_rate'))}"),
        ("loss", f"loss {_number(line.get('loss'))}"),
        ("groups", f"{line.get('informative_groups', 0)}/{line.get('groups_total', 0)} groups"),
        ("tokens", f"{line.get('trained_tokens', 0):,} tok"),
        ("update", f"update {format_duration(times.get('train', 0.0))}"),
        ("step_time", f"step {format_duration(times.get('total', 0.0))}"),
    ]
    if line.get("checkpoint"):
        parts.append(("checkpoint", f"saved {line['checkpoint']}"))
    prefix = f"agentcore-rl train step {line['step']}/{steps} done: "
    for drop in (None, *RESULT_DROP_ORDER):
        parts = [(key, text) for key, text in parts if key != drop]
        text = prefix + ", ".join(part for _, part in parts)
        if width is None or len(text) <= width:
            break
    return text


def stopped_in_update(*, step: int, steps: int, rollouts: int, checkpoint: tuple[int, Path] | None) -> str:
    """What became of a step whose update was stopped (Ctrl-C, SIGTERM): discarded, and redone
    by a resume after the newest checkpoint (`checkpoint`: its step and path, if any)."""
    after = (f"after checkpoint {checkpoint[1].name} (step {checkpoint[0] + 1} on)" if checkpoint
             else "from step 1 (no checkpoint yet)")
    return (f"agentcore-rl train step {step}/{steps}: stopped during its update; the step is discarded "
            f"(no steps.jsonl line, no checkpoint). Its {rollouts} rollouts stay in rollouts.jsonl; a "
            f"resume sets them aside and trains again {after}.")


def _number(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _percent(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def budget_stop_line(*, step: int, steps: int, checkpoint: str | None, in_flight: str = "") -> str:
    """The terminal line when the time budget ends training after `step` (either loop)."""
    return (f"agentcore-rl train: training stopped after step {step} of {steps} for the time "
            f"budget (recipe.time_budget_min), checkpoint {checkpoint} saved{in_flight}")
