"""The rules of asynchronous training (`trainer.mode=async`), as pure functions.

Vocabulary:
- version: the trainer's `policy_version`; the sampler serves it once an update has published it.
- launch version: the version when a group's rollouts were started (their first turn is sampled
  under it or a newer one).
- lag of a sample: the trainer's version when the update that trains it starts, minus the oldest
  version that sampled one of its turns (0: on-policy). `algo.max_staleness` K bounds it.
- pacing: a group starts only while at most (K + 1) x `batch_rows` groups are started and not yet
  trained, so sampling runs at most K steps ahead of the trainer.
- stragglers: `wait` - no update starts that would leave a live group more than K behind (the
  trainer waits for it), and a ready group it would leave so far behind is trained in it (a
  step may then train more than `batch_rows` groups); `drop` - updates never wait, a sample found more than K behind is
  dropped from its group and counted (`dropped_stale`), never trained and never hidden;
  `partial` - as `wait`, but where an update would wait for groups' stragglers (too few complete
  groups, or a live group it would leave more than K behind), a group whose finished samples are
  enough (`partial_ready`) trains with them alone (advantages over the samples present) and its
  unfinished samples are stopped and counted (`cut_stragglers`), never trained.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..records import Rollout


def oldest_version(rollout: Rollout) -> int | None:
    """The oldest policy version that sampled a turn of `rollout` (None: it sampled nothing)."""
    versions = [int(v) for trace in rollout.traces for v in trace.metadata.get("policy_versions") or ()]
    return min(versions) if versions else None


def sample_lag(rollout: Rollout, version: int) -> int | None:
    """How many versions `version` is ahead of the oldest turn of `rollout` (None: no turn)."""
    oldest = oldest_version(rollout)
    return None if oldest is None else version - oldest


def split_stale(rollouts: Sequence[Rollout], *, version: int, max_staleness: int
                ) -> tuple[list[Rollout], list[Rollout], dict[str, int]]:
    """(kept, dropped, histogram): samples more than `max_staleness` behind `version` are dropped;
    the histogram counts the kept samples by lag (keys are strings: it goes to JSON)."""
    kept, dropped, histogram = [], [], {}
    for rollout in rollouts:
        lag = sample_lag(rollout, version)
        if lag is not None and lag > max_staleness:
            dropped.append(rollout)
            continue
        kept.append(rollout)
        if lag is not None:
            histogram[str(lag)] = histogram.get(str(lag), 0) + 1
    return kept, dropped, dict(sorted(histogram.items(), key=lambda item: int(item[0])))


def may_start(*, outstanding_groups: int, batch_rows: int, max_staleness: int) -> bool:
    """Pacing: whether one more group may start with `outstanding_groups` started, not trained."""
    return outstanding_groups < (max_staleness + 1) * batch_rows


def blocking_straggler(waiting_launch_versions: Iterable[int], *, version: int, max_staleness: int) -> int | None:
    """Under `algo.stragglers=wait`: the launch version of a group left out of the next update
    that this update would push more than K behind (the update waits for it), else None."""
    too_old = [v for v in waiting_launch_versions if version + 1 - v > max_staleness]
    return min(too_old) if too_old else None


def partial_ready(*, finished: int, size: int, min_fraction: float) -> bool:
    """Under `algo.stragglers=partial`: whether a group of `size` samples with `finished` usable
    samples (ended with a status the trainer takes) may train without its stragglers: at least
    `min_fraction` of it and at least 2 (GRPO needs a baseline)."""
    return finished < size and finished >= max(2, math.ceil(min_fraction * size - 1e-9))


def trained_groups(step_lines: Sequence[dict[str, Any]]) -> set[str]:
    """The group ids async step lines say they trained (a resumed run keeps only their rollouts)."""
    return {group for line in step_lines for group in line.get("groups_trained") or ()}


def next_launch(rollouts: Iterable[Rollout]) -> int:
    """The launch number after every train group a run recorded (a resumed run's new groups get
    new ids, so no group of the killed run is ever joined or trained again); groups count from 1."""
    return 1 + max((r.step for r in rollouts if r.phase == "train" and r.step is not None), default=0)
