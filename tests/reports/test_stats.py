import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentcore_rl_harness.reports.stats import pass_at_k, wilson_interval


def test_wilson_known_values():
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and round(high, 4) == 0.1611
    assert wilson_interval(0, 0) == (0.0, 1.0)


@given(st.integers(min_value=1, max_value=500), st.data())
def test_wilson_contains_the_estimate(n, data):
    k = data.draw(st.integers(min_value=0, max_value=n))
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_pass_at_k_formula():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
    assert pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
