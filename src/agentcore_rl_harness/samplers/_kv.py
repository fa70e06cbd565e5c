"""KV-cache rows for continuous batching: a left-padded cache whose rows can join and leave.

A running batch is a cache (per layer, keys and values of shape [batch, kv_heads, seq, head_dim])
plus a [batch, seq] attention mask, left-padded so every row's newest token sits in the last column.
`concat_rows` merges two such batches (left-padding the shorter along seq); `select_rows` keeps some
rows and trims the columns that became padding for every remaining row. Decode steps append in
place into spare capacity (`GrowingLayer`) instead of re-concatenating the whole cache each token.
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
