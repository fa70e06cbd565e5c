"""Rewards asked of a judge model: `@arl.judge_reward(rubric=...)`.

A judged reward is a `RewardFn` that carries a rubric instead of code: the run's judge (the
`roles.judge` config node, `judges/`) reads the rubric and a transcript of the rollout and
answers a score in [0, 1]. `group=True` judges a GRPO group in one call, each sample scored
relative to the others (RULER-style). What the judge reads is the decorated function's return
value, `(rollout, row) -> str`; undecorated, `default_transcript` (the task input and the
agent's result).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .tasks import RewardFn

DEFAULT_NAME = "judge"  # a judged reward's name in `rewards[...]` unless named or decorated
Transcript = Callable[[Any, dict[str, Any]], str]


def default_transcript(rollout: Any, row: dict[str, Any]) -> str:
    """The task input (the row's `payload`, else the row without `id` / `split`) and the agent's
    result, as JSON: what a judge reads unless the reward says otherwise. Built from the record
    alone, so a rescore asks the same question (and hits the cache)."""
    task_input = row["payload"] if "payload" in row else {k: v for k, v in row.items() if k not in ("id", "split")}
    return ("Task input:\n" + json.dumps(task_input, indent=1, sort_keys=True, default=str)
            + "\n\nThe agent's result:\n" + json.dumps(rollout.result, indent=1, sort_keys=True, default=str))


def _not_called(rollout: Any, row: dict[str, Any]) -> float:
    raise TypeError("a judged reward is asked of the run's judge, not called")


@dataclass(frozen=True)
class JudgeReward(RewardFn):
    """A reward the run's judge model gives: `rubric`, pointwise or per `group`."""

    rubric: str = ""
    group: bool = False
    transcript: Transcript = default_transcript

    def __call__(self, *args: Any) -> Any:  # type: ignore[override]
        """Used as a decorator: the function gives the transcript and the reward's name."""
        if len(args) == 1 and callable(args[0]):
            function = args[0]
            return replace(self, transcript=function, name=function.__name__ if self.name == DEFAULT_NAME else self.name)
        raise TypeError(f"judged reward {self.name!r} is asked of the run's judge (roles.judge), not called; "
                        "list it in @arl.task(rewards=[...])")


def judge_reward(function: Any = None, /, *, rubric: str | None = None, name: str | None = None,
                 weight: float = 1.0, group: bool = False) -> JudgeReward:
    """Declare a judged reward: list it in `@task(rewards=[...])` as is (the judge reads
    `default_transcript`), or decorate a `(rollout, row) -> str` function that gives what the
    judge reads (its name is the reward's). `group=True`: the whole group in one call, scores
    relative to each other."""
    if function is not None:  # `@arl.judge_reward` bare, as `@arl.reward` may be
        raise TypeError(f"@judge_reward on {getattr(function, '__name__', function)!r} needs its rubric: write "
                        "@arl.judge_reward(rubric=\"1 if ..., else 0\") (with parentheses)")
    if not isinstance(rubric, str) or not rubric.strip():
        raise ValueError(f"@judge_reward(rubric={rubric!r}): give the rubric the judge scores against, "
                         "e.g. rubric=\"1 if the reply answers the question correctly, else 0\"")
    if not isinstance(group, bool):
        raise ValueError(f"@judge_reward(group={group!r}): True (judge the group together) or False")
    return JudgeReward(fn=_not_called, weight=float(weight), name=name or DEFAULT_NAME, rubric=rubric.strip(),
                       group=group)
