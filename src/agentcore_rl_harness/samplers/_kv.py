"""KV-cache rows for continuous batching: a left-padded cache whose rows can join and leave.

A running batch is a cache (per layer, keys and values of shape [batch, kv_heads, seq, head_dim])
plus a [batch, seq] attention mask, left-padded so every row's newest token sits in the last column.
A row may also have padding columns in the middle (a cached prefix, then padding, then the prompt
tail prefilled with it); the mask and position ids make them invisible, as for left padding.
`concat_rows` merges two such batches (left-padding the shorter along seq); `select_rows` keeps some
rows and trims the columns that became padding for every remaining row. `row_tensors` copies one
row's real positions out (for the prefix cache) and `cache_with_prefixes` builds a batch from such
copies. Decode steps append in place into spare capacity (`GrowingLayer`) instead of
re-concatenating the whole cache each token, and a merge or a drop copies each kept row once,
straight into a fresh buffer with spare room (it runs once per turn joining or leaving a batch).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` that appends into a buffer with spare room along seq (amortised O(1) per step)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        needed = length + key_states.shape[-2]
        buffer = self._key_buffer
        if buffer is None or needed > buffer.shape[-2] or buffer.shape[0] != key_states.shape[0]:
            self._reserve(key_states, value_states, length, capacity=needed + spare_columns(needed))
        self._key_buffer[:, :, length:needed] = key_states
        self._value_buffer[:, :, length:needed] = value_states
        self.keys = self._key_buffer[:, :, :needed]
        self.values = self._value_buffer[:, :, :needed]
        return self.keys, self.values

    @classmethod
    def over_buffers(cls, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int) -> "GrowingLayer":
        """A layer holding the first `length` columns of these buffers, growing into the rest."""
        layer = cls()
        layer.lazy_initialization(key_buffer, value_buffer)
        layer._key_buffer, layer._value_buffer = key_buffer, value_buffer
        layer.keys, layer.values = key_buffer[:, :, :length], value_buffer[:, :, :length]
        return layer

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, capacity: int) -> None:
        def grown(old: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
            batch, heads, _, dim = like.shape
            buffer = like.new_empty((batch, heads, capacity, dim))
            if length:
                buffer[:, :, :length] = old[:, :, :length]
            return buffer

        self._key_buffer = grown(self.keys, key_states)
        self._value_buffer = grown(self.values, value_states)


def new_cache() -> DynamicCache:
    """An empty cache whose layers (created on first use) are `GrowingLayer`s."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


def layer_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values); refuses cache layouts whose rows cannot be moved (sliding windows...)."""
    tensors = []
    for index, layer in enumerate(cache.layers):
        if not isinstance(layer, DynamicLayer) or getattr(layer, "is_sliding", False):
            raise TypeError(
                f"cache layer {index} is a {type(layer).__name__}; continuous batching supports only "
                "full-attention dynamic layers"
            )
        tensors.append((layer.keys, layer.values))
    return tensors


def spare_columns(width: int) -> int:
    """Room left after `width` columns when a buffer is (re)made: the next steps append into it."""
    return max(width // 2, 32)


def _layer_buffers(like: torch.Tensor, rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Uninitialised (keys, values) buffers of `rows` rows and `width` columns plus spare room."""
    _, heads, _, dim = like.shape
    shape = (rows, heads, width + spare_columns(width), dim)
    return like.new_empty(shape), like.new_empty(shape)


def concat_rows(
    cache_a: DynamicCache, mask_a: torch.Tensor, cache_b: DynamicCache, mask_b: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """Rows of `a` then rows of `b` in one left-padded cache and mask.

    Each row is copied once, right-aligned into a fresh growing buffer (only its padding is zeroed),
    so the merge costs one pass over the cache and the next decode steps append without a copy.
    """
    width = max(mask_a.shape[1], mask_b.shape[1])
    rows_a, rows_b = mask_a.shape[0], mask_b.shape[0]
    mask = mask_a.new_zeros((rows_a + rows_b, width))
    mask[:rows_a, width - mask_a.shape[1]:] = mask_a
    mask[rows_a:, width - mask_b.shape[1]:] = mask_b
    cache = new_cache()
    for (keys_a, values_a), (keys_b, values_b) in zip(layer_tensors(cache_a), layer_tensors(cache_b)):
        keys, values = _layer_buffers(keys_a, rows_a + rows_b, width)
        for buffer, part_a, part_b in ((keys, keys_a, keys_b), (values, values_a, values_b)):
            pad_a, pad_b = width - part_a.shape[2], width - part_b.shape[2]
            buffer[:rows_a, :, :pad_a].zero_()
            buffer[:rows_a, :, pad_a:width] = part_a
            buffer[rows_a:, :, :pad_b].zero_()
            buffer[rows_a:, :, pad_b:width] = part_b
        cache.layers.append(GrowingLayer.over_buffers(keys, values, width))
    return cache, mask


def select_rows(
    cache: DynamicCache, mask: torch.Tensor, keep: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """Only the rows at indices `keep`, without the leading columns that are padding in all of them.

    The kept columns are copied once into a fresh growing buffer (no intermediate gather).
    """
    mask = mask.index_select(0, keep)
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    mask = mask[:, start:].contiguous()
    width = mask.shape[1]
    rows = [int(row) for row in keep]
    fresh = new_cache()
    for keys_old, values_old in layer_tensors(cache):
        keys, values = _layer_buffers(keys_old, len(rows), width)
        for buffer, old in ((keys, keys_old), (values, values_old)):
            for target, row in enumerate(rows):
                buffer[target, :, :width] = old[row, :, start:]
        fresh.layers.append(GrowingLayer.over_buffers(keys, values, width))
    return fresh, mask


def row_tensors(cache: DynamicCache, mask: torch.Tensor, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of shape [kv_heads, n, head_dim]: copies of one row's n real positions."""
    columns = mask[row].nonzero().squeeze(-1)
    return [
        (keys[row].index_select(1, columns), values[row].index_select(1, columns))
        for keys, values in layer_tensors(cache)
    ]


def cache_with_prefixes(
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None], lengths: list[int], *, spare: int = 0
) -> tuple[DynamicCache, torch.Tensor]:
    """A left-padded cache and mask whose row i holds the first `lengths[i]` positions of `prefixes[i]`.

    Rows without a prefix (None, length 0) are all padding. `spare` reserves room for that many
    more columns, so the prefill that follows appends without reallocating.
    """
    width = max(lengths)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    if width == 0:
        return new_cache(), mask
    template = next(prefix for prefix in prefixes if prefix is not None)
    cache = new_cache()
    for layer_index, (keys_like, _) in enumerate(template):
        heads, _, dim = keys_like.shape
        keys = keys_like.new_zeros((len(lengths), heads, width + spare, dim))
        values = keys_like.new_zeros((len(lengths), heads, width + spare, dim))
        for row, (prefix, length) in enumerate(zip(prefixes, lengths)):
            if length:
                keys[row, :, width - length : width] = prefix[layer_index][0][:, :length]
                values[row, :, width - length : width] = prefix[layer_index][1][:, :length]
        cache.layers.append(GrowingLayer.over_buffers(keys, values, width))
    for row, length in enumerate(lengths):
        mask[row, width - length :] = 1
    return cache, mask
