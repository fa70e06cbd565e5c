import pytest
import torch

from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.samplers import _kv


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)


def _prefill(model, prompts):
    """Left-padded prefill of `prompts` into a growing cache: (cache, mask)."""
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for index, prompt in enumerate(prompts):
        input_ids[index, width - len(prompt):] = torch.tensor(prompt)
        mask[index, width - len(prompt):] = 1
    cache = _kv.new_cache()
    with torch.inference_mode():
        model(input_ids=input_ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
              cache=cache, use_cache=True)
    return cache, mask


def _step_logits(model, cache, mask, prompts, next_ids):
    """One decode step for every row; returns last-position logits and the grown mask."""
    mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
    positions = torch.tensor([[len(prompt)] for prompt in prompts])
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor(next_ids)[:, None], attention_mask=mask, position_ids=positions,
                       cache=cache, use_cache=True).logits[:, -1].float()
    return logits, mask


def _reference(model, sequence):
    with torch.inference_mode():
        return model(torch.tensor([sequence])).logits[0, -1].float()


def test_growing_layer_appends_like_concatenation():
    layer = _kv.GrowingLayer()
    chunks = [torch.randn(2, 3, length, 4) for length in (5, 1, 1, 40, 1)]
    for chunk in chunks:
        keys, values = layer.update(chunk, -chunk)
    torch.testing.assert_close(keys, torch.cat(chunks, dim=2))
    torch.testing.assert_close(values, -torch.cat(chunks, dim=2))
    assert layer.get_seq_length() == 48


def test_concat_rows_left_pads_the_shorter_batch_and_decodes_correctly(model):
    long_prompts, short_prompts = [[5, 6, 7, 8, 9, 10, 11]], [[20, 21], [30, 31, 32]]
    cache_a, mask_a = _prefill(model, long_prompts)
    cache_b, mask_b = _prefill(model, short_prompts)

    cache, mask = _kv.concat_rows(cache_a, mask_a, cache_b, mask_b)

    assert mask.tolist() == [[1] * 7, [0] * 5 + [1] * 2, [0] * 4 + [1] * 3]
    prompts = long_prompts + short_prompts
    logits, _ = _step_logits(model, cache, mask, prompts, [1, 2, 3])
    for row, (prompt, next_id) in enumerate(zip(prompts, [1, 2, 3])):
        torch.testing.assert_close(logits[row], _reference(model, prompt + [next_id]), atol=1e-4, rtol=0)


def test_select_rows_drops_rows_and_trims_all_padding_columns(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21], [30, 31, 32]]
    cache, mask = _prefill(model, prompts)

    cache, mask = _kv.select_rows(cache, mask, torch.tensor([1, 2]))

    assert mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert all(keys.shape[:3] == (2, keys.shape[1], 3) for keys, _ in _kv.layer_tensors(cache))
    logits, _ = _step_logits(model, cache, mask, prompts[1:], [4, 5])
    torch.testing.assert_close(logits[0], _reference(model, [20, 21, 4]), atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1], _reference(model, [30, 31, 32, 5]), atol=1e-4, rtol=0)


def test_sliding_window_layers_are_refused():
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    cache = DynamicCache()
    cache.layers.append(DynamicSlidingWindowLayer(sliding_window=4))
    with pytest.raises(TypeError, match="full-attention"):
        _kv.layer_tensors(cache)


def test_row_tensors_copy_only_real_positions(model):
    prompts = [[5, 6, 7, 8, 9], [20, 21]]
    cache, mask = _prefill(model, prompts)

    keys, values = _kv.row_tensors(cache, mask, 1)[0]
    full_keys, full_values = _kv.layer_tensors(cache)[0]

    assert keys.shape[1] == 2
    torch.testing.assert_close(keys, full_keys[1, :, 3:])
    torch.testing.assert_close(values, full_values[1, :, 3:])
    assert keys.data_ptr() != full_keys.data_ptr()


def test_cache_with_prefixes_then_prefilling_the_tails_matches_a_full_forward(model):
    long_prompt, short_prompt = list(range(100, 120)), list(range(200, 206))
    (cache_long, mask_long), (cache_short, mask_short) = _prefill(model, [long_prompt]), _prefill(model, [short_prompt])
    prefixes = [_kv.row_tensors(cache_long, mask_long, 0), None, _kv.row_tensors(cache_short, mask_short, 0)]
    cached = [12, 0, 4]  # use only part of each cached row
    prompts = [long_prompt[:15], [7, 8, 9], short_prompt[:4] + [1, 2]]

    cache, past_mask = _kv.cache_with_prefixes(prefixes, cached, spare=3)

    assert past_mask.tolist() == [[1] * 12, [0] * 12, [0] * 8 + [1] * 4]
    tails = [prompt[length:] for prompt, length in zip(prompts, cached)]
    input_ids = torch.tensor([[0] * (3 - len(tail)) + tail for tail in tails])
    tail_mask = (torch.arange(3) >= torch.tensor([3 - len(tail) for tail in tails])[:, None]).long()
    positions = torch.tensor(cached)[:, None] + (tail_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        logits = model(input_ids=input_ids, attention_mask=torch.cat([past_mask, tail_mask], -1),
                       position_ids=positions, cache=cache, use_cache=True).logits[:, -1].float()
    for row, prompt in enumerate(prompts):
        torch.testing.assert_close(logits[row], _reference(model, prompt), atol=1e-4, rtol=0)


def test_cache_with_prefixes_without_any_prefix_is_empty():
    cache, mask = _kv.cache_with_prefixes([None, None], [0, 0])
    assert mask.shape == (2, 0) and not cache.layers


def test_a_merge_and_a_drop_leave_spare_room_so_the_next_decode_step_appends_in_place(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21], [30, 31, 32]]
    cache_a, mask_a = _prefill(model, prompts[:1])
    cache_b, mask_b = _prefill(model, prompts[1:])
    merged, mask = _kv.concat_rows(cache_a, mask_a, cache_b, mask_b)
    dropped, dropped_mask = _kv.select_rows(merged, mask, torch.tensor([2, 0]))  # reordered on purpose
    for cache, width in ((merged, 7), (dropped, 7)):
        layer = cache.layers[0]
        assert layer.keys.shape[2] == width and layer._key_buffer.shape[2] > width
        buffer = layer._key_buffer.data_ptr()
        rows = layer.keys.shape[0]
        layer.update(torch.zeros(rows, layer.keys.shape[1], 1, layer.keys.shape[3]),
                     torch.zeros(rows, layer.keys.shape[1], 1, layer.keys.shape[3]))
        assert layer._key_buffer.data_ptr() == buffer and layer.keys.shape[2] == width + 1
    # the columns the merge padded are zeros, not leftover memory (masked, but they must be finite);
    # row 1 came from a batch of width 3 where it already had one padding column
    assert (merged.layers[0].keys[1, :, :4] == 0).all() and torch.isfinite(merged.layers[0].keys).all()


def test_a_dropped_and_reordered_batch_decodes_like_full_forwards(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21], [30, 31, 32]]
    cache, mask = _prefill(model, prompts)
    cache, mask = _kv.select_rows(cache, mask, torch.tensor([2, 0]))
    kept = [prompts[2], prompts[0]]
    logits, _ = _step_logits(model, cache, mask, kept, [4, 5])
    torch.testing.assert_close(logits[0], _reference(model, prompts[2] + [4]), atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[1], _reference(model, prompts[0] + [5]), atol=1e-4, rtol=0)


def _drop(*args):
    with torch.inference_mode():  # as in the sampler: the cache holds inference tensors, edited in place
        return _kv.drop_rows(*args)


def _concat(*args):
    with torch.inference_mode():
        return _kv.concat_rows(*args)


def _check_decodes(model, cache, mask, prompts, next_ids):
    logits, _ = _step_logits(model, cache, mask, prompts, next_ids)
    for row, (prompt, next_id) in enumerate(zip(prompts, next_ids)):
        torch.testing.assert_close(logits[row], _reference(model, prompt + [next_id]), atol=1e-4, rtol=0)


def test_drop_rows_moves_the_last_rows_into_the_holes_in_place(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22, 23, 24, 25], [30, 31, 32, 33, 34], [40, 41, 42, 43, 44, 45]]
    cache, mask = _prefill(model, prompts)
    store = cache.layers[0]._key_buffer.data_ptr()

    dropped, dropped_mask, order = _drop(cache, mask, [1])

    assert order == [0, 3, 2]  # the last row took the hole; nothing else moved
    assert dropped.layers[0]._key_buffer.data_ptr() == store  # no new buffers
    assert dropped_mask.tolist() == mask[[0, 3, 2]].tolist()
    _check_decodes(model, dropped, dropped_mask, [prompts[i] for i in order], [1, 2, 3])
    # two leave at once: the kept rows past the new end fill the holes below it
    cache, mask = _prefill(model, prompts)
    dropped, dropped_mask, order = _drop(cache, mask, [0, 2])
    assert order == [3, 1]
    _check_decodes(model, dropped, dropped_mask, [prompts[i] for i in order], [4, 5])


def test_drop_rows_copies_and_trims_when_the_longest_row_leaves(model):
    prompts = [list(range(50, 62)), [20, 21], [30, 31, 32]]
    cache, mask = _prefill(model, prompts)

    dropped, dropped_mask, order = _drop(cache, mask, [0])

    assert order == [1, 2] and dropped_mask.tolist() == [[0, 1, 1], [1, 1, 1]]  # 9 padding columns gone
    assert dropped.layers[0]._key_buffer.data_ptr() != cache.layers[0]._key_buffer.data_ptr()
    _check_decodes(model, dropped, dropped_mask, prompts[1:], [4, 5])


def test_rows_joining_reuse_the_slots_rows_left_in_place(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [20, 21, 22, 23, 24, 25], [30, 31, 32, 33, 34], [40, 41, 42, 43, 44, 45]]
    cache, mask = _prefill(model, prompts)
    store = cache.layers[0]._key_buffer.data_ptr()
    running, running_mask, order = _drop(cache, mask, [1, 2])
    kept = [prompts[i] for i in order]
    narrow = [[60, 61, 62], [70, 71]]
    joining, joining_mask = _prefill(model, narrow)

    joined, joined_mask = _concat(running, running_mask, joining, joining_mask)

    assert joined.layers[0]._key_buffer.data_ptr() == store  # into the free slots: no new buffers
    assert joined_mask.tolist() == running_mask.tolist() + [[0] * 4 + [1] * 3, [0] * 5 + [1] * 2]
    keys = joined.layers[0].keys
    # the columns the join padded are zeros, not the stale rows that left (row 3 came from a batch
    # of width 3 where it already had one padding column)
    assert (keys[2, :, :4] == 0).all() and (keys[3, :, :4] == 0).all()
    _check_decodes(model, joined, joined_mask, kept + narrow, [1, 2, 3, 4])
    # a fifth row has no free slot: a fresh buffer, still right
    cache, mask = _prefill(model, prompts)
    running, running_mask, order = _drop(cache, mask, [1])
    extra, extra_mask = _prefill(model, narrow)
    joined, joined_mask = _concat(running, running_mask, extra, extra_mask)
    assert joined.layers[0]._key_buffer.data_ptr() != store
    _check_decodes(model, joined, joined_mask, [prompts[i] for i in order] + narrow, [1, 2, 3, 4, 5])


def test_rows_wider_than_the_running_batch_join_through_a_fresh_buffer(model):
    prompts = [[5, 6, 7], [20, 21, 22]]
    cache, mask = _prefill(model, prompts)
    running, running_mask, _ = _drop(cache, mask, [1])
    wide = [list(range(80, 88))]
    joining, joining_mask = _prefill(model, wide)

    joined, joined_mask = _concat(running, running_mask, joining, joining_mask)

    assert joined_mask.tolist() == [[0] * 5 + [1] * 3, [1] * 8]
    _check_decodes(model, joined, joined_mask, [prompts[0]] + wide, [1, 2])
