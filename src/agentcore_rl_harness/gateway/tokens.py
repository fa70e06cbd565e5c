"""`TokenRun`: a turn's prompt ids as a view of a buffer its whole chain of turns shares.

A turn's prompt is its parent's prompt + the parent's sampled ids + a short suffix. Copying that
into a new tuple every turn costs O(history) time per turn and O(turns x history) memory per
session (about 400 MB for a 1000-turn, 100k-token session). A `TokenRun` is the first `length`
ids of an append-only list: extending the latest turn of a chain appends the new ids in place;
extending any other turn (a fork, a retried request) copies once, so no run ever sees ids
change. It reads like a tuple (len, index, slice, iteration, ==, +); samplers iterate it.
The turn tree keeps a chain's normalised messages and their keys the same way (any items), and
so do the wires' known histories (`known_history.py`): the messages a request holds are a run
that the next request extends, so a turn touches only its new messages, never each old one.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = ["TokenRun", "first"]

# Extending checks that nothing was appended after the run, then appends: one step for any thread.
_EXTENDING = threading.Lock()


class TokenRun(Sequence[int]):
    __slots__ = ("_buffer", "_length")

    def __init__(self, buffer: list[int], length: int) -> None:
        self._buffer, self._length = buffer, length

    @classmethod
    def of(cls, token_ids: Sequence[int]) -> "TokenRun":
        """`token_ids` as a run (the same object when it already is one)."""
        if isinstance(token_ids, TokenRun):
            return token_ids
        buffer = list(token_ids)
        return cls(buffer, len(buffer))

    def extended(self, *parts: Sequence[int]) -> "TokenRun":
        """This run followed by `parts`: in place when nothing was appended after this run."""
        with _EXTENDING:
            buffer = self._buffer
            if len(buffer) != self._length:
                buffer = buffer[:self._length]
            for part in parts:
                buffer.extend(part)
            return TokenRun(buffer, len(buffer))

    def first(self, count: int) -> "TokenRun":
        """The first `count` items, as a run of the same buffer (no copy; `run[:count]` copies)."""
        if not 0 <= count <= self._length:
            raise IndexError(f"a run of {self._length} items has no first {count}")
        return self if count == self._length else TokenRun(self._buffer, count)

    def starts_with(self, other: Sequence[Any]) -> bool:
        """Whether `other` is a run of this run's buffer no longer than it: then this run starts
        with exactly `other`'s items (one check, no comparison of items)."""
        return isinstance(other, TokenRun) and other._buffer is self._buffer and other._length <= self._length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self._buffer[slice(*index.indices(self._length))])
        if not -self._length <= index < self._length:
            raise IndexError("token index out of range")
        return self._buffer[index % self._length]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self._buffer, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenRun):
            return self._length == other._length and (
                self._buffer is other._buffer or tuple(self) == tuple(other))
        if isinstance(other, (tuple, list)):
            return self._length == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[int]) -> tuple[int, ...]:
        return (*self, *other)

    def __radd__(self, other: Sequence[int]) -> tuple[int, ...]:
        return (*other, *self)

    def __repr__(self) -> str:
        return f"TokenRun({list(self)!r})" if self._length <= 16 else f"TokenRun(<{self._length} ids>)"


def first(items: Sequence[Any], count: int) -> Sequence[Any]:
    """`items[:count]`, as a run of the same buffer (no copy) when `items` is a run."""
    return items.first(count) if isinstance(items, TokenRun) else items[:count]
