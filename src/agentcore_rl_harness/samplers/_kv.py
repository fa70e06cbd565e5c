"""KV-cache rows for continuous batching: a left-padded cache whose rows can join and leave.

A running batch is a cache (per layer, keys and values of shape [batch, kv_heads, seq, head_dim])
plus a [batch, seq] attention mask, left-padded so every row's newest token sits in the last column.
A row may also have padding columns in the middle (a cached prefix, then padding, then the prompt
tail prefilled with it); the mask and position ids make them invisible, as for left padding.
`concat_rows` merges two such batches (left-padding the shorter along seq); `select_rows` keeps some
rows and trims the columns that became padding for every remaining row; `drop_rows` lets rows
leave in place, moving the last rows into their slots. `row_tensors` copies one
row's real positions out (for the prefix cache) and `cache_with_prefixes` builds a batch from such
copies. Decode steps append in place into spare capacity (`GrowingLayer`) instead of
re-concatenating the whole cache each token, and a merge or a drop copies each kept row once,
straight into a fresh buffer with spare room (it runs once per turn joining or leaving a batch).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` that appends into a buffer with spare room along seq (amortised O(1) per step)."""

    store_dtype: torch.dtype | None = None  # keys/values are kept in this dtype (None: as computed)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key_buffer: torch.Tensor | None = None  # the batch's rows: [rows, heads, capacity, dim]
        self._value_buffer: torch.Tensor | None = None
        # The buffers these rows are the first of (None: the buffers themselves). Rows that left in
        # place (`drop_rows`) free the slots after them, which rows joining in place (`concat_rows`) reuse.
        self._stores: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        dtype = self.store_dtype if self._key_buffer is None else self._key_buffer.dtype
        if dtype is not None and key_states.dtype != dtype:  # a bf16 model's new columns, kept in fp32
            key_states, value_states = key_states.to(dtype), value_states.to(dtype)
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
    def over_buffers(
        cls, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int,
        stores: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> "GrowingLayer":
        """A layer holding the first `length` columns of these buffers, growing into the rest;
        `stores`: the larger buffers whose first rows these are."""
        layer = cls()
        layer.lazy_initialization(key_buffer, value_buffer)
        layer._key_buffer, layer._value_buffer = key_buffer, value_buffer
        layer._stores = stores
        layer.keys, layer.values = key_buffer[:, :, :length], value_buffer[:, :, :length]
        return layer

    def stores(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The (keys, values) buffers whose first rows this layer's rows are."""
        return self._stores or (self._key_buffer, self._value_buffer)

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, capacity: int) -> None:
        def grown(old: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
            batch, heads, _, dim = like.shape
            buffer = like.new_empty((batch, heads, capacity, dim))
            if length:
                buffer[:, :, :length] = old[:, :, :length]
            return buffer

        self._key_buffer = grown(self.keys, key_states)
        self._value_buffer = grown(self.values, value_states)
        self._stores = None


class Float32Layer(GrowingLayer):
    """A `GrowingLayer` that keeps keys and values in fp32 whatever the model computes them in: a
    bfloat16 model's attention then runs in fp32 (`_fp32_attention.py`)."""

    store_dtype = torch.float32


def device_of(model: Any) -> torch.device:
    """Where `model`'s weights are: every tensor the sampler feeds it is built there."""
    parameter = next(iter(model.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def new_cache(float32: bool = False) -> DynamicCache:
    """An empty cache whose layers (created on first use) are `GrowingLayer`s (`Float32Layer`s)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = Float32Layer if float32 else GrowingLayer
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
    When rows of `a` left in place (`drop_rows`) and `b` is no wider than `a`, b's rows go into
    those free slots instead and a's rows are not copied at all.
    """
    width = max(mask_a.shape[1], mask_b.shape[1])
    rows_a, rows_b = mask_a.shape[0], mask_b.shape[0]
    free_slots = _movable(cache_a, mask_a.shape[1], lambda layer: layer.stores()[0].shape[0] >= rows_a + rows_b)
    if free_slots and mask_b.shape[1] <= mask_a.shape[1]:
        return _join_in_place(cache_a, mask_a, cache_b, mask_b)
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


def _movable(cache: DynamicCache, width: int, rows_fit: Any) -> bool:
    """Every layer a `GrowingLayer` of `width` columns over buffers whose store row count satisfies
    `rows_fit` (so rows can move within it or join it in place)."""
    return bool(cache.layers) and all(
        isinstance(layer, GrowingLayer) and layer._key_buffer is not None and layer.keys.shape[2] == width
        and rows_fit(layer)
        for layer in cache.layers
    )


def _join_in_place(
    cache_a: DynamicCache, mask_a: torch.Tensor, cache_b: DynamicCache, mask_b: torch.Tensor
) -> tuple[DynamicCache, torch.Tensor]:
    """`concat_rows` when b's rows fit in the free slots after a's rows and in a's width: only b's
    rows are copied (right-aligned, their padding zeroed); a's rows stay where they are."""
    (rows_a, width), (rows_b, width_b) = mask_a.shape, mask_b.shape
    rows, pad = rows_a + rows_b, width - width_b
    mask = mask_a.new_zeros((rows, width))
    mask[:rows_a] = mask_a
    mask[rows_a:, pad:] = mask_b
    joined = new_cache()
    for layer_a, (keys_b, values_b) in zip(cache_a.layers, layer_tensors(cache_b)):
        key_store, value_store = layer_a.stores()
        for store, part in ((key_store, keys_b), (value_store, values_b)):
            store[rows_a:rows, :, :pad].zero_()
            store[rows_a:rows, :, pad:width] = part
        joined.layers.append(
            GrowingLayer.over_buffers(key_store[:rows], value_store[:rows], width, (key_store, value_store))
        )
    return joined, mask


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


def drop_rows(
    cache: DynamicCache, mask: torch.Tensor, leaving: list[int]
) -> tuple[DynamicCache, torch.Tensor, list[int]]:
    """The batch without the rows at indices `leaving` (some row must stay): (cache, mask, order),
    where new row j is old row `order[j]`.

    A row leaves at the end of every turn, so this runs about as often as rows join. Usually each
    kept row past the new end moves into a leaving row's slot, in place, and the buffers are kept:
    only those rows are copied. When the rows that stay would have more than a quarter of the width
    as leading padding (the longest rows left), `select_rows` copies them into fresh buffers
    without those columns instead.
    """
    total, width = mask.shape
    gone = set(leaving)
    keep = [row for row in range(total) if row not in gone]
    kept = torch.tensor(keep, device=mask.device)
    used = mask.index_select(0, kept).any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else width
    if 4 * start > width or not _movable(cache, width, lambda layer: layer._key_buffer.shape[0] == total):
        fresh, kept_mask = select_rows(cache, mask, kept)
        return fresh, kept_mask, keep
    count = len(keep)
    order = list(range(count))
    holes = [row for row in sorted(gone) if row < count]
    movers = [row for row in keep if row >= count]
    for source, target in zip(movers, holes):
        order[target] = source
    moved = new_cache()
    for layer in cache.layers:
        key_store, value_store = layer.stores()
        for store in (key_store, value_store):
            for source, target in zip(movers, holes):
                store[target, :, :width] = store[source, :, :width]
        moved.layers.append(
            GrowingLayer.over_buffers(key_store[:count], value_store[:count], width, (key_store, value_store))
        )
    return moved, mask.index_select(0, torch.tensor(order, device=mask.device)), order


def row_tensors(cache: DynamicCache, mask: torch.Tensor, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of shape [kv_heads, n, head_dim]: copies of one row's n real positions."""
    columns = mask[row].nonzero().squeeze(-1)
    return [
        (keys[row].index_select(1, columns), values[row].index_select(1, columns))
        for keys, values in layer_tensors(cache)
    ]


def cache_with_prefixes(
    prefixes: list[list[tuple[torch.Tensor, torch.Tensor]] | None], lengths: list[int], *, spare: int = 0,
    float32: bool = False, device: torch.device | str = "cpu",
) -> tuple[DynamicCache, torch.Tensor]:
    """A left-padded cache and mask whose row i holds the first `lengths[i]` positions of `prefixes[i]`.

    Rows without a prefix (None, length 0) are all padding. `spare` reserves room for that many
    more columns, so the prefill that follows appends without reallocating. `float32`: an empty
    cache (no prefix at all) keeps what the model adds in fp32 (prefixes already are). `device`:
    the model's, where the mask is built (prefixes are already there).
    """
    width = max(lengths)
    mask = torch.zeros((len(lengths), width), dtype=torch.long, device=device)
    if width == 0:
        return new_cache(float32), mask
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
