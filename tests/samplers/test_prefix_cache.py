import pytest

from agentcore_rl_harness.samplers import _prefix_cache
from agentcore_rl_harness.samplers._prefix_cache import BLOCK, PrefixCache, buckets, shared_prefixes


def _seq(start, length):
    return tuple(range(start, start + length))


SYSTEM = _seq(1000, 3 * BLOCK + 5)


def test_lookup_finds_the_longest_common_prefix_with_any_entry():
    cache = PrefixCache(capacity_tokens=1000)
    cache.insert(SYSTEM + _seq(1, 20), "first question")
    cache.insert(SYSTEM[:BLOCK + 3] + _seq(50, 40), "other system prompt")

    length, payload = cache.lookup(SYSTEM + _seq(7, 30))  # a new question behind the same system prompt

    assert (length, payload) == (len(SYSTEM), "first question")


def test_lookup_respects_max_length_and_ignores_matches_shorter_than_a_block():
    cache = PrefixCache(capacity_tokens=1000)
    cache.insert(SYSTEM, "system")

    assert cache.lookup(SYSTEM, max_length=len(SYSTEM) - 1) == (len(SYSTEM) - 1, "system")
    assert cache.lookup(SYSTEM[: BLOCK - 1] + (1, 2, 3)) == (0, None)
    assert cache.lookup(SYSTEM, max_length=BLOCK - 1) == (0, None)
    assert cache.lookup(_seq(5, 40)) == (0, None)


def test_an_extension_replaces_its_prefix_entry_and_a_prefix_adds_nothing():
    cache = PrefixCache(capacity_tokens=1000)
    cache.insert(SYSTEM, "turn 1")

    assert cache.insert(SYSTEM + _seq(1, 10), "turn 2")
    assert not cache.insert(SYSTEM[:40], "shorter")
    assert not cache.insert(SYSTEM + _seq(1, 10), "same again")

    assert len(cache) == 1 and cache.cached_tokens == len(SYSTEM) + 10
    assert cache.lookup(SYSTEM + _seq(1, 10) + (9,))[1] == "turn 2"


def test_lru_evicts_least_recently_used_entries_to_stay_within_the_token_budget():
    cache = PrefixCache(capacity_tokens=100)
    for index in range(3):
        cache.insert(_seq(index * 1000, 40), index)  # 120 tokens offered: the oldest goes
    assert len(cache) == 2 and cache.cached_tokens == 80
    assert cache.lookup(_seq(0, 40))[1] is None

    cache.lookup(_seq(1000, 40))  # touch entry 1, so entry 2 is now the oldest
    cache.insert(_seq(9000, 50), "new")

    assert cache.cached_tokens <= 100
    assert cache.lookup(_seq(1000, 40))[1] == 1 and cache.lookup(_seq(2000, 40))[1] is None
    assert not cache.insert(_seq(5, 101), "too big")


def test_hash_collisions_never_give_a_wrong_match(monkeypatch):
    monkeypatch.setattr(_prefix_cache, "_chain", lambda tokens: iter([7] * (len(tokens) // BLOCK)))
    cache = PrefixCache(capacity_tokens=1000)
    cache.insert(_seq(0, 40), "a")

    assert cache.lookup(_seq(500, 40)) == (0, None)
    assert cache.lookup(_seq(0, 35) + (1,)) == (35, "a")


def test_clear_forgets_everything():
    cache = PrefixCache(capacity_tokens=1000)
    cache.insert(SYSTEM, "system")
    cache.clear()
    assert len(cache) == 0 and cache.cached_tokens == 0 and cache.lookup(SYSTEM) == (0, None)


def test_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="capacity"):
        PrefixCache(capacity_tokens=-1)


def test_shared_prefixes_are_found_only_when_they_save_enough():
    questions = [SYSTEM + _seq(start, 10) for start in (1, 30, 60)]

    assert shared_prefixes(questions, [0, 0, 0], min_gain=32) == [SYSTEM]
    assert shared_prefixes(questions, [len(SYSTEM) - 5] * 3, min_gain=32) == []
    assert shared_prefixes([SYSTEM + (1,)], [0], min_gain=32) == []


def test_buckets_keep_padding_small():
    assert buckets([300, 10, 290, 12]) == [[0, 2], [3, 1]]
    assert buckets([5, 6, 7, 8]) == [[3, 2, 1, 0]]  # short prompts batch despite padding
