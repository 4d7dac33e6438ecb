"""Uncertainty of the averages and paired comparisons of configurations. Definitions: docs/statistics.md.

Every function works on per-query values (one number per query, e.g. a metric column of the per-query
table) and is vectorised with numpy: resamples are drawn as whole matrices and reduced with a matrix
product, never with a Python loop over resamples or queries. Work is cut into chunks of about
`CHUNK_BYTES` per matrix so that memory stays bounded whatever the sizes.

Randomness is seeded: the same inputs and seed give the same numbers on every rerun. The resamples a
group of m values gets depend only on (seed, m, n_resamples), so the batched interval of a group equals
the one-group interval of its values.
"""

from __future__ import annotations

import math

import numpy as np

from chunkeval.errors import InputError

CHUNK_BYTES = 32 * 2**20  # bytes of one working matrix (resample counts, means, sign flips)
EXACT_MAX_N = 16  # paired_permutation enumerates all 2**n sign flips up to this many pairs
TIE_TOLERANCE = 1e-12  # |flipped mean| >= |observed| - tolerance counts as at least as extreme


# --------------------------------------------------------------------------- input checks


def _check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not 0.0 < c < 1.0:
        raise InputError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    return c


def _check_resamples(n_resamples: int) -> int:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return int(n_resamples)


def _vector(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"{name} must be a one-dimensional array of per-query values, got shape {arr.shape}")
    return arr


def paired_differences(a, b) -> np.ndarray:
    """a − b over the pairs where neither value is NaN; at least 2 such pairs are required."""
    a, b = _vector(a, "a"), _vector(b, "b")
    if len(a) != len(b):
        raise InputError(f"paired values need arrays of the same length, got {len(a)} and {len(b)}")
    keep = ~(np.isnan(a) | np.isnan(b))
    if keep.sum() < 2:
        raise InputError(f"a paired comparison needs at least 2 pairs of non-NaN values, got {int(keep.sum())}")
    return a[keep] - b[keep]


# --------------------------------------------------------------------------- bootstrap intervals


def _rows_per_chunk(width: int) -> int:
    return max(1, CHUNK_BYTES // (8 * max(width, 1)))


def _bootstrap_means(matrix: np.ndarray, n_resamples: int, seed) -> np.ndarray:
    """Means of `n_resamples` bootstrap resamples of every row of `matrix` (G, m): an array (G, n_resamples).

    The resample of the m positions is the same for every row: row r of a count matrix C says how often
    each position is drawn in resample r, and the means are matrix @ C.T / m. The counts come from a
    fresh generator seeded with `seed`, drawn in chunks of a size that depends only on m.
    """
    g, m = matrix.shape
    rng = np.random.default_rng(seed)
    rows = _rows_per_chunk(m)
    out = np.empty((g, n_resamples), dtype=np.float64)
    for lo in range(0, n_resamples, rows):
        r = min(rows, n_resamples - lo)
        idx = rng.integers(0, m, size=(r, m))
        idx += np.arange(r)[:, None] * m
        counts = np.bincount(idx.ravel(), minlength=r * m).reshape(r, m).astype(np.float64)
        out[:, lo:lo + r] = matrix @ counts.T
    out /= m
    return out


def bootstrap_ci_groups(values, groups, n_resamples: int = 10_000, confidence: float = 0.95, seed=0,
                        n_groups: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of the mean of every group at once.

    `groups[i]` is the integer code (0, 1, …) of the group (configuration) of `values[i]`; the order of
    the values within a group is kept. Returns (low, high), each of length `n_groups` (default: the
    largest code + 1). NaN values are ignored; a group with no non-NaN value gets (NaN, NaN), a group of
    one value v or of equal values v gets (v, v).
    """
    values = _vector(values, "values")
    groups = np.asarray(groups)
    if groups.ndim != 1 or len(groups) != len(values):
        raise InputError(f"groups must be a one-dimensional array as long as values ({len(values)}), got shape {groups.shape}")
    if len(groups) and not np.issubdtype(groups.dtype, np.integer):
        raise InputError(f"groups must be integer group codes, got dtype {groups.dtype}")
    groups = groups.astype(np.int64)
    if len(groups) and groups.min() < 0:
        raise InputError("groups must be non-negative integer codes")
    n_resamples = _check_resamples(n_resamples)
    confidence = _check_confidence(confidence)
    top = int(groups.max()) + 1 if len(groups) else 0
    if n_groups is None:
        n_groups = top
    elif n_groups < top:
        raise InputError(f"n_groups is {n_groups} but the largest group code is {top - 1}")

    keep = ~np.isnan(values)
    v, g = values[keep], groups[keep]
    order = np.argsort(g, kind="stable")
    v = v[order]
    sizes = np.bincount(g, minlength=n_groups)
    starts = np.cumsum(sizes) - sizes
    low = np.full(n_groups, np.nan)
    high = np.full(n_groups, np.nan)
    alpha = (1.0 - confidence) / 2.0
    block = max(1, CHUNK_BYTES // (8 * n_resamples))  # groups whose resample means are held at once
    for m in np.unique(sizes[sizes > 0]).tolist():
        members = np.flatnonzero(sizes == m)
        matrix = v[starts[members][:, None] + np.arange(m)]
        lo_v, hi_v = matrix.min(axis=1), matrix.max(axis=1)
        low[members], high[members] = lo_v, hi_v
        varied = np.flatnonzero(lo_v < hi_v)  # one value, or all equal: (v, v)
        for b in range(0, len(varied), block):
            rows = varied[b:b + block]
            means = _bootstrap_means(matrix[rows], n_resamples, seed)
            q = np.quantile(means, [alpha, 1.0 - alpha], axis=1)
            # a mean lies within [min, max]; clipping removes rounding outside it
            low[members[rows]] = np.clip(q[0], lo_v[rows], hi_v[rows])
            high[members[rows]] = np.clip(q[1], lo_v[rows], hi_v[rows])
    return low, high


def bootstrap_ci(values, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (queries resampled with replacement).

    NaN values are ignored; no value left gives (NaN, NaN), one value v (or all equal to v) gives (v, v).
    """
    values = _vector(values, "values")
    low, high = bootstrap_ci_groups(values, np.zeros(len(values), dtype=np.int64), n_resamples, confidence, seed, n_groups=1)
    return float(low[0]), float(high[0])


def paired_diff_ci(a, b, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference a − b (pairs resampled together)."""
    return bootstrap_ci(paired_differences(a, b), n_resamples, confidence, seed)


# --------------------------------------------------------------------------- paired tests


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
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
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
    rng = np.random.default_rng(seed)
    rows = _rows_per_chunk(n)
    extreme = 0
    for lo in range(0, n_resamples, rows):
        r = min(rows, n_resamples - lo)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(r, n))
        extreme += int(np.count_nonzero(np.abs(signs @ d) / n >= observed - tol))
    return (1 + extreme) / (1 + n_resamples)


def paired_permutation_columns(diffs: np.ndarray, n_resamples: int = 10_000, seed=0) -> np.ndarray:
    """`paired_permutation` of every column of `diffs` (n pairs × m comparisons, no NaN): the same
    p-values, with the random sign flips drawn once for all columns (each column still meets them
    as one matrix-vector product, exactly as alone)."""
    d = np.asarray(diffs, dtype=np.float64)
    n_resamples = _check_resamples(n_resamples)
    n, m = d.shape
    if n < 2 or np.isnan(d).any():
        raise InputError("paired_permutation_columns needs at least 2 pairs and no NaN")
    tol = TIE_TOLERANCE * np.maximum(1.0, np.abs(d).max(axis=0))
    if n <= EXACT_MAX_N:
        return np.asarray([paired_permutation(d[:, j], np.zeros(n), n_resamples, seed) for j in range(m)])
    observed = np.asarray([abs(float(np.ones(n) @ d[:, j]) / n) for j in range(m)])
    rng = np.random.default_rng(seed)
    rows = _rows_per_chunk(n)
    extreme = np.zeros(m, dtype=np.int64)
    for lo in range(0, n_resamples, rows):
        r = min(rows, n_resamples - lo)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(r, n))
        for j in range(m):
            extreme[j] += int(np.count_nonzero(np.abs(signs @ d[:, j]) / n >= observed[j] - tol[j]))
    return (1 + extreme) / (1 + n_resamples)


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
    d = paired_differences(a, b)
    keep = ~(np.isnan(a) | np.isnan(b))
    low, high = bootstrap_ci(d, n_resamples, confidence, seed)
    return {
        "n_queries": int(len(d)),
        "mean_a": float(a[keep].mean()),
        "mean_b": float(b[keep].mean()),
        "mean_diff": float(d.mean()),
        "ci_low": low,
        "ci_high": high,
        "p_ttest": paired_ttest(a, b),
        "p_permutation": paired_permutation(a, b, n_resamples, seed),
        "p_adjusted": float("nan"),
    }
