"""xdist's scheduler under `pytest -n --agentcore-rl` (sharding.py); imported only where xdist is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import EachScheduling

Share = Callable[[Any, int], list[int]]  # (node, collection size) -> the indices it runs


class ShardScheduling(EachScheduling):
    """Each worker gets its whole share at once (the share whose rollouts it started); a dead
    worker's unfinished items go to no one (its replacement's share is empty)."""

    def __init__(self, config: pytest.Config, log: Any, *, share: Share) -> None:
        super().__init__(config, log)
        self._share = share

    def remove_node(self, node: Any) -> str | None:
        pending = self.node2pending.pop(node)
        return self.node2collection[node][pending[0]] if pending else None

    def schedule(self) -> None:
        for node, pending in self.node2pending.items():
            if node in self._started:
                continue
            if node in self.node2collection:
                pending[:] = self._share(node, len(self.node2collection[node]))
                if pending:
                    node.send_runtest_some(pending)
            node.shutdown()
            self._started.append(node)
