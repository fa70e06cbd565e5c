"""KV-cache rows for continuous batching: a left-padded cache whose rows can join and leave.

A running batch is a cache (per layer, keys and values of shape [batch, kv_heads, seq, head_dim])
plus a [batch, seq] attention mask, left-padded so every row's newest token sits in the last column.
A row may also have padding columns in the middle (a cached prefix, then padding, then the prompt
tail prefilled with it); the mask and position ids make them invisible, as for left padding.
`concat_rows` merges two such batches (left-padding the shorter along seq); `select_rows` keeps some
rows and trims the columns that became padding for every remaining row. `row_tensors` copies one
row's real positions out (for the prefix cache) and `cache_with_prefixes` builds a batch from such
copies. Decode steps append in place into spare capacity (`GrowingLayer`) instead of
re-concatenating the whole cache each token.
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
            self._reserve(key_states, value_states, length, capacity=needed + max(needed // 2, 32))
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


def cache_from(tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """A fresh growing cache holding these per-layer (keys, values)."""
    cache = new_cache()
    for keys, values in tensors:
        layer = GrowingLayer()
        layer.update(keys, values)
        cache.layers.append(layer)
    return cache


def _left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def concat_rows(
    cache_a: DynamicCache, mask_a: torch.Tensor, cache_b: DynamicCache, mask_b: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """Rows of `a` then rows of `b` in one left-padded cache and mask."""
    width = max(mask_a.shape[1], mask_b.shape[1])
    mask = torch.cat([_left_pad(mask_a, width, 1), _left_pad(mask_b, width, 1)], dim=0)
    tensors = [
        (
            torch.cat([_left_pad(keys_a, width, 2), _left_pad(keys_b, width, 2)], dim=0),
            torch.cat([_left_pad(values_a, width, 2), _left_pad(values_b, width, 2)], dim=0),
        )
        for (keys_a, values_a), (keys_b, values_b) in zip(layer_tensors(cache_a), layer_tensors(cache_b))
    ]
    return cache_from(tensors), mask


def select_rows(
    cache: DynamicCache, mask: torch.Tensor, keep: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """Only the rows at indices `keep`, without the leading columns that are padding in all of them."""
    mask = mask.index_select(0, keep)
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    mask = mask[:, start:].contiguous()
    tensors = [
        (keys.index_select(0, keep)[:, :, start:], values.index_select(0, keep)[:, :, start:])
        for keys, values in layer_tensors(cache)
    ]
    return cache_from(tensors), mask


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
