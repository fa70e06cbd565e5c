"""Cost of a row joining or leaving a running batch's KV cache (`samplers/_kv.py`), against the
two-copy path it replaced, both measured in this run.

Every agent turn joins the sampler's running batch once (`concat_rows`: the turn's prefilled rows
after the running ones) and leaves it once (`select_rows`: the finished row dropped). Both rebuild
the whole cache. The old path gathered the rows (`torch.cat` / `index_select`: one copy) and then
copied that into a growing buffer with spare room (`GrowingLayer.update`: a second copy); the
current one writes each row once, straight into the growing buffer. A leave now goes through
`drop_rows`, which moves the last row into the leaving row's slot in place (one row copied) unless
trimming leading padding is worth a full copy; its line compares it with `select_rows`. A join
after such a leave writes the joining row into the freed slot ("join (free slot)").

Shapes are SmolLM2-135M's cache in fp32 (30 layers, 3 KV heads, head dim 64); the batch is `--rows`
running rows of `--width` columns, as in the office pack's level 1m (16 sessions, ~700-1500 tokens).

    python bench/kv_merge.py [--rows 16] [--width 1200] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from agentcore_rl_harness.samplers import _kv

LAYERS, HEADS, DIM = 30, 3, 64


def _batch(rows: int, width: int, pad: int) -> tuple[object, torch.Tensor]:
    """A growing cache of `rows` rows x `width` columns whose first row starts after `pad` padding columns."""
    cache = _kv.new_cache()
    for _ in range(LAYERS):
        layer = _kv.GrowingLayer()
        layer.update(torch.randn(rows, HEADS, width, DIM), torch.randn(rows, HEADS, width, DIM))
        cache.layers.append(layer)
    mask = torch.ones((rows, width), dtype=torch.long)
    mask[0, :pad] = 0
    return cache, mask


def _old_cache_from(tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> object:
    cache = _kv.new_cache()
    for keys, values in tensors:
        layer = _kv.GrowingLayer()
        layer.update(keys, values)  # copies into a new buffer with spare room
        cache.layers.append(layer)
    return cache


def _left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def old_concat_rows(cache_a, mask_a, cache_b, mask_b):
    """The path before: cat (a copy), then `GrowingLayer.update` (a second copy)."""
    width = max(mask_a.shape[1], mask_b.shape[1])
    mask = torch.cat([_left_pad(mask_a, width, 1), _left_pad(mask_b, width, 1)], dim=0)
    tensors = [
        (torch.cat([_left_pad(ka, width, 2), _left_pad(kb, width, 2)], dim=0),
         torch.cat([_left_pad(va, width, 2), _left_pad(vb, width, 2)], dim=0))
        for (ka, va), (kb, vb) in zip(_kv.layer_tensors(cache_a), _kv.layer_tensors(cache_b))
    ]
    return _old_cache_from(tensors), mask


def old_select_rows(cache, mask, keep):
    """The path before: index_select (a copy), then `GrowingLayer.update` (a second copy)."""
    mask = mask.index_select(0, keep)
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else mask.shape[1]
    mask = mask[:, start:].contiguous()
    tensors = [(k.index_select(0, keep)[:, :, start:], v.index_select(0, keep)[:, :, start:])
               for k, v in _kv.layer_tensors(cache)]
    return _old_cache_from(tensors), mask


def _time(function, repeat: int) -> float:
    """Median seconds of `repeat` calls (after one warm-up call)."""
    function()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16, help="rows in the running batch")
    parser.add_argument("--width", type=int, default=1200, help="its columns (tokens)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    running, running_mask = _batch(args.rows - 1, args.width, pad=200)
    joining, joining_mask = _batch(1, args.width - 300, pad=0)
    full, full_mask = _batch(args.rows, args.width, pad=200)
    keep = torch.tensor([index for index in range(args.rows) if index != args.rows // 2])

    # Same result both ways (padding columns aside, which the mask hides).
    new = _kv.concat_rows(running, running_mask, joining, joining_mask)
    old = old_concat_rows(running, running_mask, joining, joining_mask)
    assert torch.equal(new[1], old[1])
    assert all(torch.equal(a.keys * new[1][:, None, :, None], b.keys * old[1][:, None, :, None])
               for a, b in zip(new[0].layers, old[0].layers))
    new, old = _kv.select_rows(full, full_mask, keep), old_select_rows(full, full_mask, keep)
    assert torch.equal(new[1], old[1]) and all(torch.equal(a.keys, b.keys) for a, b in zip(new[0].layers, old[0].layers))

    # A leave in place: the same rows as select_rows', reordered (the last row fills the hole).
    fresh, fresh_mask = _batch(args.rows, args.width, pad=200)
    kept, kept_mask = _kv.select_rows(fresh, fresh_mask, keep)
    moved, moved_mask, order = _kv.drop_rows(fresh, fresh_mask, [args.rows // 2])
    position = {row: index for index, row in enumerate(keep.tolist())}
    again = torch.tensor([position[row] for row in order])
    assert torch.equal(moved_mask, kept_mask.index_select(0, again))
    assert all(torch.equal(a.keys, b.keys.index_select(0, again)) for a, b in zip(moved.layers, kept.layers))

    megabytes = 2 * LAYERS * args.rows * HEADS * args.width * DIM * 4 / 1e6
    print(f"cache: {args.rows} rows x {args.width} columns, {megabytes:.0f} MB (fp32, SmolLM2-135M shapes); "
          f"median of {args.repeat}, {torch.get_num_threads()} threads")
    for label, current, before in (
        ("join (concat_rows)", lambda: _kv.concat_rows(running, running_mask, joining, joining_mask),
         lambda: old_concat_rows(running, running_mask, joining, joining_mask)),
        ("leave (select_rows)", lambda: _kv.select_rows(full, full_mask, keep),
         lambda: old_select_rows(full, full_mask, keep)),
    ):
        now, then = _time(current, args.repeat), _time(before, args.repeat)
        print(f"{label:<20} one copy {1000 * now:7.1f} ms   two copies (before) {1000 * then:7.1f} ms   "
              f"ratio {then / now:.2f}x")
    # drop_rows moves the last row into the hole in place, so each timed call drops from a batch
    # of the same shape (its buffers keep their row count; only the view shrinks).
    in_place = _time(lambda: _kv.drop_rows(full, full_mask, [args.rows // 2]), args.repeat)
    copied = _time(lambda: _kv.select_rows(full, full_mask, keep), args.repeat)
    print(f"{'leave (drop_rows)':<20} in place {1000 * in_place:7.1f} ms   one copy (select_rows) "
          f"{1000 * copied:7.1f} ms   ratio {copied / in_place:.2f}x")
    # A join after a leave in place: the joining row goes into the freed slot (running rows stay put).
    slotted, slotted_mask, _ = _kv.drop_rows(*_batch(args.rows, args.width, pad=200), [args.rows // 2])
    into_slot = _time(lambda: _kv.concat_rows(slotted, slotted_mask, joining, joining_mask), args.repeat)
    copied = _time(lambda: _kv.concat_rows(running, running_mask, joining, joining_mask), args.repeat)
    print(f"{'join (free slot)':<20} in place {1000 * into_slot:7.1f} ms   one copy (concat_rows) "
          f"{1000 * copied:7.1f} ms   ratio {copied / into_slot:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
