"""`TokenRun`: prompts that share their chain's buffer read like tuples and never change."""

from __future__ import annotations

import pytest

from agentcore_rl_harness.gateway.tokens import TokenRun


def test_extending_the_latest_run_appends_in_place_and_a_fork_copies():
    root = TokenRun.of((1, 2, 3))
    child = root.extended((4,), (5, 6))
    assert child == (1, 2, 3, 4, 5, 6) and child._buffer is root._buffer  # no copy of the history
    grandchild = child.extended((7,))
    assert grandchild._buffer is root._buffer
    retry = child.extended((8, 9))  # a second child of `child`: its own buffer
    assert retry == (1, 2, 3, 4, 5, 6, 8, 9) and retry._buffer is not root._buffer
    assert grandchild == (1, 2, 3, 4, 5, 6, 7) and root == (1, 2, 3) and child == [1, 2, 3, 4, 5, 6]


def test_a_run_reads_like_a_tuple():
    run = TokenRun.of((10, 11, 12, 13)).extended((14,))
    run.extended((99,))  # appended after `run`: invisible to it
    assert len(run) == 5 and list(run) == [10, 11, 12, 13, 14] and tuple(run) == (10, 11, 12, 13, 14)
    assert run[0] == 10 and run[-1] == 14 and run[-8:] == (10, 11, 12, 13, 14) and run[1:3] == (11, 12)
    assert run[::2] == (10, 12, 14)
    with pytest.raises(IndexError):
        run[5]
    assert run + (15,) == (10, 11, 12, 13, 14, 15) and (9,) + run == (9, 10, 11, 12, 13, 14)
    assert (10, 11, 12, 13, 14) == run and run != (10, 11, 12, 13) and run != "x"
    assert hash(run) == hash((10, 11, 12, 13, 14)) and TokenRun.of(run) is run


def test_first_is_a_view_and_starts_with_needs_the_same_buffer():
    run = TokenRun.of([1, 2, 3]).extended([4, 5])
    head = run.first(3)
    assert head == (1, 2, 3) and run.first(5) is run and run.first(0) == ()
    assert run.starts_with(head) and not head.starts_with(run)
    assert not run.starts_with(TokenRun.of([1, 2, 3])) and not run.starts_with((1, 2, 3))  # equal, not shared
    grown = head.extended([9])  # head is not the latest of its buffer: a copy, run is untouched
    assert grown == (1, 2, 3, 9) and run == (1, 2, 3, 4, 5) and not run.starts_with(grown)
    with pytest.raises(IndexError):
        run.first(6)
