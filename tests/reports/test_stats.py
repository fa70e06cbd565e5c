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


from agentcore_rl_harness.reports.stats import (  # noqa: E402
    bootstrap_mean_interval, mcnemar_exact, paired_bootstrap, pass_hat_k,
)


def test_mcnemar_exact_known_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # scipy.stats.binomtest(5, 5).pvalue
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375)
    assert mcnemar_exact(3, 3) == 1.0


def test_pass_hat_k_formula():
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(4, 1, 2) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)


@given(st.integers(min_value=1, max_value=30), st.data())
def test_pass_k_properties(n, data):
    c = data.draw(st.integers(min_value=0, max_value=n))
    at = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    hat = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
    assert at[0] == pytest.approx(c / n) and hat[0] == pytest.approx(c / n)
    assert all(a <= b + 1e-12 for a, b in zip(at, at[1:]))  # pass@k grows with k
    assert all(a >= b - 1e-12 for a, b in zip(hat, hat[1:]))  # pass^k shrinks with k
    assert all(h <= a + 1e-12 for h, a in zip(hat, at))


def test_bootstrap_interval_is_seeded_and_sane():
    values = [0.0, 1.0] * 20
    assert bootstrap_mean_interval(values, seed=0) == bootstrap_mean_interval(values, seed=0)
    low, high = bootstrap_mean_interval(values, seed=0)
    assert 0.3 < low < 0.5 < high < 0.7
    assert bootstrap_mean_interval([], seed=0) is None
    assert bootstrap_mean_interval([2.0], seed=0) == (2.0, 2.0)


def test_paired_bootstrap_detects_a_shift_and_not_noise():
    import random

    rng = random.Random(0)
    shifted = [0.5 + rng.gauss(0, 0.3) for _ in range(40)]
    low, high, p = paired_bootstrap(shifted, seed=0)
    assert p < 0.01 and low > 0
    noise = [rng.gauss(0, 0.3) for _ in range(40)]
    assert paired_bootstrap(noise, seed=0)[2] > 0.05
    assert paired_bootstrap([0.0] * 5, seed=0)[2] == 1.0
    assert paired_bootstrap([], seed=0) is None
