"""Token-level bookkeeping for prefill prefix caching (no torch here: payloads are opaque).

`PrefixCache` maps token sequences the model has processed to their KV payload and answers "what is
the longest cached prefix of this prompt?". Because attention is causal, the KV of a cached sequence
at positions < m is valid for ANY sequence sharing its first m tokens, so a lookup returns the
longest common prefix with any entry, not only entries that are whole prefixes of the prompt.

Index: the chained hash of each full `BLOCK`-token prefix of every entry. A lookup walks the
prompt's chain to the deepest block some entry shares, then extends token by token within the next
block, and checks the winner token by token, so a hash collision can never yield a wrong match.
Matches shorter than one block are not found; they are not worth a copy.

Memory is bounded by an LRU over the total number of cached tokens. An entry that is a prefix of a
newly inserted one is dropped (the new one covers it); inserting a prefix of an entry only touches it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

BLOCK = 16

Payload = TypeVar("Payload")


@dataclass(eq=False)
class _Entry(Generic[Payload]):
    tokens: tuple[int, ...]
    payload: Payload
    chain: tuple[int, ...]  # chained hash of each full block prefix


def _chain(tokens: Sequence[int]) -> Iterator[int]:
    digest = 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        digest = hash((digest, tuple(tokens[start : start + BLOCK])))
        yield digest


def common_prefix_length(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the longest common prefix of `a` and `b`, assuming the first `start` tokens agree."""
    limit = min(len(a), len(b))
    index = start
    while index < limit and a[index] == b[index]:
        index += 1
    return index


class PrefixCache(Generic[Payload]):
    """LRU of processed token sequences and their KV payloads, bounded by `capacity_tokens`."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"prefix cache capacity must be >= 0 tokens (0 disables it), got {capacity_tokens}")
        self.capacity_tokens = capacity_tokens
        self.cached_tokens = 0
        self._entries: OrderedDict[int, _Entry[Payload]] = OrderedDict()  # id -> entry, oldest first
        self._by_block: dict[int, dict[int, _Entry[Payload]]] = {}  # block-chain hash -> entries through it
        self._by_last_block: dict[int, dict[int, _Entry[Payload]]] = {}  # entries whose chain ends there

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._by_block.clear()
        self._by_last_block.clear()
        self.cached_tokens = 0

    def lookup(self, tokens: Sequence[int], max_length: int | None = None) -> tuple[int, Payload | None]:
        """(m, payload): the payload's first m positions are valid for `tokens[:m]`; (0, None) if no hit.

        `max_length` caps m (pass `len(prompt) - 1` so at least one prompt token is still fed).
        """
        limit = len(tokens) if max_length is None else min(max_length, len(tokens))
        candidates: dict[int, _Entry[Payload]] | None = None
        depth = 0
        for digest in _chain(tokens):
            found = self._by_block.get(digest)
            if not found:
                break
            candidates, depth = found, depth + 1
        if candidates is None:
            return 0, None
        shared = depth * BLOCK
        best, best_length = None, -1
        for entry in candidates.values():
            length = common_prefix_length(tokens, entry.tokens, start=shared)
            if length > best_length:
                best, best_length = entry, length
        if best is None or tuple(tokens[:shared]) != best.tokens[:shared]:
            return 0, None  # a hash collision: no valid hit
        self._entries.move_to_end(id(best))
        length = min(best_length, limit)
        return (length, best.payload) if length >= BLOCK else (0, None)

    def covers(self, tokens: Sequence[int]) -> bool:
        """True if some entry starts with all of `tokens` (inserting them would add nothing)."""
        return len(tokens) >= BLOCK and self.lookup(tokens)[0] == len(tokens)

    def insert(self, tokens: Sequence[int], payload: Payload) -> bool:
        """Cache `payload` (KV for every position of `tokens`); False if it is too short or too long."""
        tokens = tuple(tokens)
        if len(tokens) < BLOCK or len(tokens) > self.capacity_tokens or self.covers(tokens):
            return False
        chain = tuple(_chain(tokens))
        for digest in chain:  # entries that are prefixes of `tokens` are now redundant
            for entry in list(self._by_last_block.get(digest, {}).values()):
                if tokens[: len(entry.tokens)] == entry.tokens:
                    self._remove(entry)
        entry = _Entry(tokens, payload, chain)
        self._entries[id(entry)] = entry
        for digest in chain:
            self._by_block.setdefault(digest, {})[id(entry)] = entry
        self._by_last_block.setdefault(chain[-1], {})[id(entry)] = entry
        self.cached_tokens += len(tokens)
        while self.cached_tokens > self.capacity_tokens:
            self._remove(next(iter(self._entries.values())))
        return True

    def _remove(self, entry: _Entry[Payload]) -> None:
        del self._entries[id(entry)]
        for digest in entry.chain:
            holders = self._by_block[digest]
            del holders[id(entry)]
            if not holders:
                del self._by_block[digest]
        holders = self._by_last_block[entry.chain[-1]]
        del holders[id(entry)]
        if not holders:
            del self._by_last_block[entry.chain[-1]]
        self.cached_tokens -= len(entry.tokens)


def shared_prefixes(prompts: Sequence[tuple[int, ...]], hits: Sequence[int], min_gain: int) -> list[tuple[int, ...]]:
    """Prefixes shared by two or more `prompts` that extend some prompt's cache hit by >= `min_gain` tokens.

    Prefilling these first (and caching them) lets each prompt then prefill only its own tail: N
    different questions behind one system prompt cost one system prompt plus N questions.
    """
    order = sorted(range(len(prompts)), key=lambda index: prompts[index])
    shared: set[tuple[int, ...]] = set()
    for left, right in zip(order, order[1:]):
        length = common_prefix_length(prompts[left], prompts[right])
        if length - max(hits[left], hits[right]) >= min_gain:
            shared.add(prompts[left][:length])
    return sorted(shared)


def buckets(lengths: Sequence[int], *, slack: float = 0.25, allowance: int = 32) -> list[list[int]]:
    """Group indices into left-padded prefill batches, longest first, wasting little compute on padding.

    A batch costs rows x longest; a row joins while the padding stays within `slack` of the real
    tokens plus `allowance` per row (short prompts gain more from batching than they lose to padding).
    """
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    groups: list[list[int]] = []
    for index in order:
        if groups:
            group = groups[-1]
            width = lengths[group[0]]
            real = sum(lengths[member] for member in group) + lengths[index]
            if width * (len(group) + 1) - real <= slack * real + allowance * (len(group) + 1):
                group.append(index)
                continue
        groups.append([index])
    return groups
