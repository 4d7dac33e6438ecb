"""Paired tests of two configurations' per-query values: the paired t-test (its p-value from the regularised
incomplete beta function, checked against scipy), the paired randomisation (sign-flip) test, exact up to
`EXACT_MAX_N` pairs, Holm's step-down correction, and `compare_paired`, which gives them with a bootstrap
interval of the mean difference. Definitions: docs/statistics.md."""

from __future__ import annotations

import functools
import math

import numpy as np

from chunkeval.errors import InputError
from chunkeval.stats.resampling import (
    _check_resamples,
    _rows_per_chunk,
    _vector,
    bootstrap_ci_groups,
    paired_differences,
)


def paired_ttest(a, b) -> float:
    """Two-sided paired t-test p-value of mean(a − b) = 0 (scipy.stats.ttest_rel).

    t = mean(d) / (s_d / √n) with n − 1 degrees of freedom ν, and p = P(|T_ν| ≥ |t|) = I_{ν/(ν+t²)}(ν/2, 1/2),
    the regularised incomplete beta function (`incomplete_beta`). Zero variance: all differences 0
    gives p = 1, all equal and non-zero gives p = 0.
    """
    d = paired_differences(a, b)
    if d.min() == d.max():
        return 1.0 if d[0] == 0 else 0.0
    n = len(d)
    t = d.mean() / math.sqrt(d.var(ddof=1) / n)
    nu = n - 1
    return float(min(1.0, incomplete_beta(nu / 2, 0.5, nu / (nu + t * t))))


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0 and
    0 ≤ x ≤ 1: its continued fraction (modified Lentz), on the side of x where it converges fast
    (I_x(a, b) = 1 − I_{1−x}(b, a)). Relative error about 1e-15; the tests hold it to scipy.special.betainc.
    Here so that a regression check needs no scipy (whose import costs a quarter of a second)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-16:
            break
    return front * f


def paired_permutation(a, b, n_resamples: int = 10_000, seed=0) -> float:
    """Two-sided paired randomisation test of mean(a − b) = 0 by sign flips of the differences.

    n ≤ EXACT_MAX_N: exact, p = #{flips s : |mean(s·d)| ≥ |mean(d)| − tol} / 2^n over all 2^n flips.
    Otherwise: p = (1 + #{resamples as extreme}) / (1 + n_resamples) over random flips (seeded).
    """
    d = paired_differences(a, b)
    n_resamples = _check_resamples(n_resamples)
    n = len(d)
    tol = TIE_TOLERANCE * max(1.0, float(np.abs(d).max()))
    if n <= EXACT_MAX_N:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        flipped = ((1 - 2 * bits).astype(np.float64) @ d) / n  # row 0 flips nothing: the observed mean
        return float(np.count_nonzero(np.abs(flipped) >= abs(flipped[0]) - tol) / 2**n)
    observed = abs(float(np.ones(n) @ d) / n)
    extreme = 0
    for signs in sign_flips(n, n_resamples, seed):
        extreme += int(np.count_nonzero(np.abs(signs @ d) / n >= observed - tol))
    return (1 + extreme) / (1 + n_resamples)


def paired_permutation_columns(diffs: np.ndarray, n_resamples: int = 10_000, seed=0) -> np.ndarray:
    """`paired_permutation` of every column of `diffs` (n pairs × m comparisons, no NaN): the same
    p-values, with the random sign flips drawn once for all columns and met by all of them in one
    matrix product. A flipped mean may differ from the one-column product's in its last bits; each is
    compared with the observed mean less `TIE_TOLERANCE`, far above that, so the counts are the same."""
    d = np.asarray(diffs, dtype=np.float64)
    n_resamples = _check_resamples(n_resamples)
    n, m = d.shape
    if n < 2 or np.isnan(d).any():
        raise InputError("paired_permutation_columns needs at least 2 pairs and no NaN")
    tol = TIE_TOLERANCE * np.maximum(1.0, np.abs(d).max(axis=0))
    if n <= EXACT_MAX_N:
        return np.asarray([paired_permutation(d[:, j], np.zeros(n), n_resamples, seed) for j in range(m)])
    observed = np.asarray([abs(float(np.ones(n) @ d[:, j]) / n) for j in range(m)])
    extreme = np.zeros(m, dtype=np.int64)
    for signs in sign_flips(n, n_resamples, seed):
        extreme += np.count_nonzero(np.abs(signs @ d) / n >= observed - tol, axis=0)
    return (1 + extreme) / (1 + n_resamples)


def sign_flips(n: int, n_resamples: int, seed):
    """The random sign flips (±1.0, in chunks of resamples × n) of the randomisation tests: `paired_permutation`,
    its columns and the max-T of `chunkeval.stats.maxt`, so that the same seed flips each question alike in all of
    them. Those of an integer seed are drawn once and kept for the next test (`_sign_flips`); a generator given as
    the seed is drawn from as it stands."""
    return (
        _sign_flips(n, n_resamples, seed) if isinstance(seed, (int, np.integer)) else _draw_flips(n, n_resamples, seed)
    )


def _draw_flips(n: int, n_resamples: int, seed):
    """The random sign flips of `paired_permutation` (n > EXACT_MAX_N), chunk by chunk as it draws them."""
    rng = np.random.default_rng(seed)
    rows = _rows_per_chunk(n)
    for lo in range(0, n_resamples, rows):
        yield 1.0 - 2.0 * rng.integers(0, 2, size=(min(rows, n_resamples - lo), n))


@functools.lru_cache(maxsize=1)
def _sign_flips(n: int, n_resamples: int, seed: int) -> tuple[np.ndarray, ...]:
    """`_draw_flips` of an integer seed, kept for the next test of as many pairs (the ties of every metric of one
    run and the gate's max-T meet the same flips; 23 MB for 10,000 flips of 284 questions)."""
    chunks = tuple(_draw_flips(n, n_resamples, seed))
    for chunk in chunks:
        chunk.flags.writeable = False
    return chunks


def holm(pvalues) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values, in the order given. NaN stays NaN and is not counted."""
    p = _vector(pvalues, "pvalues")
    out = np.full(len(p), np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    if len(valid) and (p[valid].min() < 0 or p[valid].max() > 1):
        raise InputError("p-values must lie in [0, 1]")
    m = len(valid)
    order = valid[np.argsort(p[valid], kind="stable")]
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def compare_paired(a, b, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> dict:
    """Paired comparison of two configurations' per-query values (pairs with a NaN are dropped).

    Keys: n_queries, mean_a, mean_b, mean_diff (a − b), ci_low, ci_high (bootstrap interval of
    mean_diff), p_ttest, p_permutation, and p_adjusted (NaN here: filled by the caller after `holm`
    over all the comparisons it reports).
    """
    a, b = _vector(a, "a"), _vector(b, "b")
    paired_differences(a, b)  # the same length, and at least 2 pairs without NaN
    keep = ~(np.isnan(a) | np.isnan(b))
    return compare_paired_rows(a[keep][None, :], b[keep][None, :], n_resamples, confidence, seed)[0]


def compare_paired_rows(a, b, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> list[dict]:
    """`compare_paired` of each row of `a` against the same row of `b` (P comparisons × n pairs, no NaN), as
    many comparisons of the same questions are made (each configuration against the best): the same numbers,
    each row meeting the same resamples and sign flips as alone, drawn once and met by all rows in one matrix
    product (`bootstrap_ci_groups`, `paired_permutation_columns`)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.shape[1] < 2 or np.isnan(a).any() or np.isnan(b).any():
        raise InputError("compare_paired_rows needs two arrays of the same shape, at least 2 pairs a row, no NaN")
    d = a - b
    rows, n = d.shape
    low, high = bootstrap_ci_groups(d.ravel(), np.repeat(np.arange(rows), n), n_resamples, confidence, seed, rows)
    permuted = paired_permutation_columns(d.T, n_resamples, seed)
    return [
        {
            "n_queries": n,
            "mean_a": float(a[i].mean()),
            "mean_b": float(b[i].mean()),
            "mean_diff": float(d[i].mean()),
            "ci_low": float(low[i]),
            "ci_high": float(high[i]),
            "p_ttest": paired_ttest(a[i], b[i]),
            "p_permutation": float(permuted[i]),
            "p_adjusted": float("nan"),
        }
        for i in range(rows)
    ]


EXACT_MAX_N = 16  # paired_permutation enumerates all 2**n sign flips up to this many pairs


TIE_TOLERANCE = 1e-12  # |flipped mean| >= |observed| - tolerance counts as at least as extreme
