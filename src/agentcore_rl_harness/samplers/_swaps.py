"""When an in-process sampler's weights may change (`hf_local.py`): only while no row is in flight.

A row is sampled under one policy version from its first token to its last, so a weight change
waits for the rows in flight, and no new row is admitted while one waits. Two kinds of change:

- `now` (`set_policy_version`): the caller waits until the change is made;
- `later` (`publish_weights`): the caller returns at once; the change is made as soon as no row
  is in flight (at once when none is, else when the last one finishes; no row is admitted
  meanwhile). A trainer
  does not wait for the sampler's rows to finish, and its next update overlaps them; `settle`
  waits for it (before writing weights the sampler may still be decoding). A newer `later`
  replaces one not made yet: its weights are the newer ones.

Every change runs under the sampler's lock (its forward steps hold it), after the condition's
(`state`): the order `hf_local`'s admission takes them in too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Change = Callable[[], None]


class WeightSwaps:
    def __init__(self, lock: Any) -> None:
        self.lock = lock  # the sampler's lock
        self.state = threading.Condition()
        self.in_flight = 0  # rows admitted, not finished
        self._waiting = 0  # `now` changes waiting for the rows in flight
        self._later: Change | None = None  # the newest `later` change, not made yet

    def now(self, change: Change) -> None:
        """Make `change` once no row is in flight (admitting none meanwhile); returns once made."""
        if self.lock._is_owned() and self.in_flight:
            raise RuntimeError(
                "publish_weights/set_policy_version wait for the rows in flight, which need `lock`; "
                "call them without holding HFLocalSampler.lock"
            )
        with self.state:
            self._waiting += 1
            try:
                self.state.wait_for(lambda: self.in_flight == 0)
                self._make_later()  # an older published change first
                with self.lock:
                    change()
            finally:
                self._waiting -= 1
                self.state.notify_all()

    def later(self, change: Change) -> None:
        """Make `change` as soon as no row is in flight; returns at once (made already if none is)."""
        with self.state:
            self._later = change
            if self.in_flight == 0:
                self._make_later()

    def settle(self) -> None:
        """Wait until every `later` change is made (the sampler decodes the newest weights)."""
        with self.state:
            self.state.wait_for(lambda: self._later is None)

    def open(self) -> bool:
        """Under `state`: whether new rows may be admitted now."""
        return not self._waiting and self._later is None

    def wait_open(self, timeout: float) -> None:
        with self.state:
            self.state.wait_for(self.open, timeout=timeout)

    def release(self, count: int) -> None:
        """`count` rows finished (by the worker, under the sampler's lock): the last one makes a
        `later` change waiting for it."""
        if count:
            with self.state:
                self.in_flight -= count
                if self.in_flight == 0:
                    self._make_later()
                self.state.notify_all()

    def _make_later(self) -> None:
        if self._later is not None:
            change, self._later = self._later, None
            with self.lock:
                change()
            self.state.notify_all()
