"""`RecordingTrainer`: a `Trainer` for tests beside `runtimes.fake.FakeRuntime` and
`samplers.scripted.ScriptedSampler`: it changes no weights and records what it was given (each
step's groups, each checkpoint saved or loaded, each supervised step, whether it was closed)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..records import Trace
from .base import StepMetrics, TrainGroup, Trainer
from .sft import SFTMetrics


class RecordingTrainer(Trainer):
    """Records, never trains: `steps` (each step's groups), `saved` / `loaded` checkpoint paths,
    `sft_batches` (each supervised step's traces), `sft_losses` (each loss evaluation's traces), `closed`."""

    def __init__(self) -> None:
        self.policy_version = 0
        self.steps: list[list[TrainGroup]] = []
        self.saved: list[Path] = []
        self.loaded: list[Path] = []
        self.sft_batches: list[list[Trace]] = []
        self.sft_losses: list[list[Trace]] = []
        self.closed = False

    async def step(self, *, groups: Sequence[TrainGroup]) -> StepMetrics:
        self.steps.append(list(groups))
        self.policy_version += 1
        return StepMetrics(
            step=len(self.steps), policy_version=self.policy_version, loss=0.5, kl=None, sampler_kl=None,
            clip_fraction=None, trained_tokens=0, sequences=0, groups=len(groups), groups_skipped=0,
            reward_mean=None, reward_std=None, advantage_abs_mean=None, grad_norm=None, staleness_max=None,
            staleness_mean=None, wall_time_s=0.0, lr=0.0,
        )

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.saved.append(Path(path))

    def load_checkpoint(self, path: str | os.PathLike[str]) -> int:
        self.loaded.append(Path(path))
        return int(Path(path).name.removeprefix("step-"))

    def sft_step(self, traces: Sequence[Trace], *, lr: float | None = None) -> SFTMetrics:
        self.sft_batches.append(list(traces))
        tokens = sum(sum(t.loss_mask) for t in traces)
        return SFTMetrics(step=len(self.sft_batches), policy_version=self.policy_version, loss=0.5,
                          trained_tokens=tokens, sequences=len(traces), grad_norm=None, lr=lr or 0.0,
                          wall_time_s=0.0)

    def sft_loss(self, traces: Sequence[Trace]) -> float:
        self.sft_losses.append(list(traces))
        return 0.5

    def close(self) -> None:
        self.closed = True
