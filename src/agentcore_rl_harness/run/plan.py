"""Case planning: which cases a mode runs for a task, and the keys that match them to records.

    eval     items = test-split cases                 (phase "eval")
    collect  items = train-split cases, also parquet  (phase "collect")
    run      pre-eval of the item cases (phase "pre") -> training -> items = post-eval ("post")
    train    training only; one item per task that passes when training finished
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import HarnessConfig
from ..errors import HarnessError
from ..records import Rollout
from ..reports.model import ITEM_PHASE
from ..tasks import TaskSpec, case_id, load_rows
from .cases import Case
from .sanity import check_task

MODES = ("eval", "collect", "train", "run")
CaseKey = tuple[str, str, int]  # (task, row id, sample index): one case per phase


@dataclass(frozen=True)
class TrainItem:
    """The one item of a task in `train` mode: it passes when training finished."""

    spec: TaskSpec


PlannedItem = Case | TrainItem


def item_split(mode: str, config: HarnessConfig) -> str:
    """The dataset split a mode's items come from (`collect`: train; else `eval.split`)."""
    return "train" if mode == "collect" else config.eval.split


def plan_cases(spec: TaskSpec, *, mode: str, config: HarnessConfig) -> list[PlannedItem]:
    """The items of one task: (row x sample) cases of the mode's split, or one `TrainItem`."""
    check_task(spec, config.agent)
    if mode == "train":
        return [TrainItem(spec)]
    split = item_split(mode, config)
    rows = load_rows(spec, split)
    if not rows:
        raise HarnessError(f"task {spec.name}: dataset {spec.dataset} has no {split!r} rows")
    if config.eval.max_rows is not None:
        rows = rows[: config.eval.max_rows]
    samples = config.eval.samples or spec.samples
    return [
        Case(spec=spec, row=row, sample_index=index, phase=ITEM_PHASE[mode])
        for row in rows
        for index in range(samples)
    ]


def item_name(item: PlannedItem) -> str:
    """The id of an item among its task's items (`train`, `r0-s1`, `row-3-s0`)."""
    return "train" if isinstance(item, TrainItem) else case_id(item.row_id, item.sample_index)


def case_key(item: Case | Rollout) -> CaseKey:
    """Matches a case to its rollout record (a resumed run keeps finished ones)."""
    if isinstance(item, Case):
        return (item.spec.name, item.row_id, item.sample_index)
    return (item.task, item.row_id, item.sample_index)
