"""Judged rewards in scoring: what the judge reads of a rollout, and of its group.

`Judging` is what the scorer asks for the value of an `@arl.judge_reward`: pointwise, the
rollout's transcript; `group=True`, the transcripts of every finished member of its GRPO group
(the rollout's own included), in sample order, judged in one call (`judges/service.py` asks it
once for the whole group). `members` gives a group's other members: the harness's `GroupBoard`
in a run, the recorded rollouts in `rescore`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..judged import JudgeReward
from ..judges.service import JudgeService
from .cases import Case

Members = Callable[[Case], Awaitable[dict[int, Any]]]  # sample index -> RolloutHandle


def transcript_of(reward: JudgeReward, rollout: Any, row: dict[str, Any]) -> str:
    text = reward.transcript(rollout, dict(row))
    if not isinstance(text, str):
        raise TypeError(f"judged reward {reward.name}: its transcript function returned "
                        f"{type(text).__name__}, not the str the judge reads")
    return text


class Judging:
    """The run's judge service and the way to a rollout's group."""

    def __init__(self, service: JudgeService, members: Members) -> None:
        self.service = service
        self.members = members

    async def value(self, reward: JudgeReward, rollout: Any, case: Case) -> float:
        """The judge's score of `rollout` (a RolloutHandle) under `reward`."""
        if not reward.group:
            return await self.service.score(rubric=reward.rubric, transcript=transcript_of(reward, rollout, case.row))
        group = dict(await self.members(case))
        group[rollout.sample_index] = rollout
        order = sorted(group)
        transcripts = [transcript_of(reward, group[index], case.row) for index in order]
        return await self.service.score_group(rubric=reward.rubric, transcripts=transcripts,
                                              index=order.index(rollout.sample_index))

    async def aclose(self) -> None:
        await self.service.aclose()
