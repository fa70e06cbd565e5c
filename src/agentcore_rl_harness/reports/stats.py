"""Pure statistics for reports: Wilson, bootstrap, unbiased pass@k and pass^k, McNemar."""

from __future__ import annotations

import math
from collections.abc import Sequence


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n == 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one row with n samples, c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"k={k} exceeds the {n} samples of the row")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mcnemar_exact(improved: int, regressed: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs (a binomial test at 1/2)."""
    n = improved + regressed
    if n == 0:
        return 1.0
    k = min(improved, regressed)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k draws succeed) for one row: C(c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"k={k} exceeds the {n} samples of the row")
    return math.comb(c, k) / math.comb(n, k)


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_mean_interval(
    values: Sequence[float], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (seeded, so a report is reproducible)."""
    if not values:
        return None
    import numpy as np

    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(min(low, data.mean())), float(max(high, data.mean()))


def paired_bootstrap(
    differences: Sequence[float], *, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float, float] | None:
    """Paired bootstrap of a mean difference: (ci_low, ci_high, two-sided p-value).

    The p-value resamples the differences re-centred on zero (the null of no change) and counts
    resampled means at least as far from zero as the observed one, with the +1 correction so that
    it is never exactly 0. One pair, or no mean change, gives p = 1.
    """
    if not differences:
        return None
    import numpy as np

    data = np.asarray(differences, dtype=float)
    observed = float(data.mean())
    low, high = bootstrap_mean_interval(differences, seed=seed, resamples=resamples)  # type: ignore[misc]
    if len(data) < 2 or abs(observed) < 1e-12:
        return low, high, 1.0
    rng = np.random.default_rng(seed + 1)
    centred = data - observed
    means = centred[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    extreme = int(np.sum(np.abs(means) >= abs(observed) - 1e-12))
    return low, high, (extreme + 1) / (resamples + 1)
