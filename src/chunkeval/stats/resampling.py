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

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from chunkeval.errors import InputError

CHUNK_BYTES = 32 * 2**20  # bytes of one working matrix (resample counts, means, sign flips)
# blocks of bootstrap intervals made at once (each CHUNK_BYTES of means and as much of counts): the cores a machine has,
# up to 4, since finding the interval's ends (numpy's partition) and the matrix product release the GIL
BLOCK_THREADS = max(1, min(4, os.cpu_count() or 1))


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
        out[:, lo : lo + r] = matrix @ counts.T
    out /= m
    return out


def percentiles(rows: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """`np.quantile(rows, quantiles, axis=1)` (its default, linear interpolation: Hyndman and Fan's 7th) of a matrix
    of finite numbers, equal to it to the last bit: the same order statistics found by partitioning each row where
    it lies in memory (numpy's own moves the axis first and partitions across rows: 2 s of a warm demo run's
    intervals), and numpy's own interpolation between them. Returns (len(quantiles), rows)."""
    rows = np.asarray(rows, dtype=np.float64)
    n = rows.shape[1]
    virtual = (n - 1) * np.asarray(quantiles, dtype=np.float64)
    if not n or np.isnan(rows).any() or (virtual < 0).any() or (virtual >= n - 1).any():
        return np.quantile(rows, quantiles, axis=1)
    below = np.floor(virtual).astype(np.intp)
    ordered = np.partition(rows, np.unique(np.concatenate((below, below + 1))), axis=1)
    a, b = ordered[:, below].T, ordered[:, below + 1].T
    gamma = (virtual - below)[:, None]
    out = a + (b - a) * gamma  # numpy's _lerp: from the nearer end where gamma ≥ ½
    np.subtract(b, (b - a) * (1 - gamma), out=out, where=gamma >= 0.5)
    return out


def bootstrap_ci_groups(
    values, groups, n_resamples: int = 10_000, confidence: float = 0.95, seed=0, n_groups: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of the mean of every group at once.

    `groups[i]` is the integer code (0, 1, …) of the group (configuration) of `values[i]`; the order of
    the values within a group is kept. Returns (low, high), each of length `n_groups` (default: the
    largest code + 1). NaN values are ignored; a group with no non-NaN value gets (NaN, NaN), a group of
    one value v or of equal values v gets (v, v).
    """
    values = _vector(values, "values")
    groups = np.asarray(groups)
    if groups.ndim != 1 or len(groups) != len(values):
        raise InputError(
            f"groups must be a one-dimensional array as long as values ({len(values)}), got shape {groups.shape}"
        )
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
    blocks = []  # (the groups, their values, their smallest and largest value)
    for m in np.unique(sizes[sizes > 0]).tolist():
        members = np.flatnonzero(sizes == m)
        matrix = v[starts[members][:, None] + np.arange(m)]
        lo_v, hi_v = matrix.min(axis=1), matrix.max(axis=1)
        low[members], high[members] = lo_v, hi_v
        varied = np.flatnonzero(lo_v < hi_v)  # one value, or all equal: (v, v)
        for b in range(0, len(varied), block):
            rows = varied[b : b + block]
            blocks.append((members[rows], matrix[rows], lo_v[rows], hi_v[rows]))

    def interval(part):
        groups, values, smallest, largest = part
        q = percentiles(_bootstrap_means(values, n_resamples, seed), [alpha, 1.0 - alpha])
        # a mean lies within [min, max]; clipping removes rounding outside it
        low[groups], high[groups] = np.clip(q[0], smallest, largest), np.clip(q[1], smallest, largest)

    if len(blocks) > 1 and isinstance(seed, (int, np.integer)):  # each block draws from its own seeded generator
        with ThreadPoolExecutor(min(BLOCK_THREADS, len(blocks))) as pool:  # numpy's partition runs without the GIL
            list(pool.map(interval, blocks))
    else:
        for part in blocks:
            interval(part)
    return low, high


def bootstrap_ci(values, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (queries resampled with replacement).

    NaN values are ignored; no value left gives (NaN, NaN), one value v (or all equal to v) gives (v, v).
    """
    values = _vector(values, "values")
    low, high = bootstrap_ci_groups(
        values, np.zeros(len(values), dtype=np.int64), n_resamples, confidence, seed, n_groups=1
    )
    return float(low[0]), float(high[0])


def paired_diff_ci(a, b, n_resamples: int = 10_000, confidence: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference a − b (pairs resampled together)."""
    return bootstrap_ci(paired_differences(a, b), n_resamples, confidence, seed)


# --------------------------------------------------------------------------- paired tests
