"""Driving a `run.core.Run` as the pytest plugin does, without pytest (tests/run and the
kept-ACR-session tests): start the items, then per item its body and pytest's verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.run.scoring import ItemFailed


def drive_items(run, items: Sequence[tuple[str, Any]],
                arguments: Callable[[str, Any], dict[str, Any]]) -> dict[str, str]:
    """Start `items` (id, planned item), run each body with `arguments(item_id, item)` and record
    its verdict; item id -> "passed" or the name of the exception that failed it."""
    run.start(items)
    outcomes = {}
    for item_id, item in items:
        try:
            run.run_item(item_id, item.spec.fn, arguments(item_id, item))
        except (ItemFailed, AssertionError, HarnessError) as exc:
            outcomes[item_id] = type(exc).__name__
            run.record_item(item_id, passed=False, error=f"{type(exc).__name__}: {exc}")
        else:
            outcomes[item_id] = "passed"
            run.record_item(item_id, passed=True)
    return outcomes
