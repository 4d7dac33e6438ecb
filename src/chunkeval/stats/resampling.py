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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from chunkeval.errors import InputError

CHUNK_BYTES = 32 * 2**20  # bytes of one working matrix (resample counts, means, sign flips)
# blocks of bootstrap intervals made at once (each CHUNK_BYTES of means and as much of counts): the cores a machine has,
# up to 4, since finding the interval's ends (numpy's sort) and the matrix product release the GIL
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


def _resample_counts(m: int, n_resamples: int, seed) -> Iterator[np.ndarray]:
    """The bootstrap resamples of m positions as count matrices, chunk by chunk: row r of a chunk says how often
    each position is drawn in that resample. From a fresh generator seeded with `seed`, in chunks of a size
    that depends only on m, so the same (m, n_resamples, seed) always give the same resamples."""
    rng = np.random.default_rng(seed)
    rows = _rows_per_chunk(m)
    for lo in range(0, n_resamples, rows):
        r = min(rows, n_resamples - lo)
        idx = rng.integers(0, m, size=(r, m))
        idx += np.arange(r)[:, None] * m
        yield np.bincount(idx.ravel(), minlength=r * m).reshape(r, m).astype(np.float64)


def _bootstrap_means(matrix: np.ndarray, n_resamples: int, seed, counts: list[np.ndarray] | None = None) -> np.ndarray:
    """Means of `n_resamples` bootstrap resamples of every row of `matrix` (G, m): an array (G, n_resamples).

    The resample of the m positions is the same for every row: the means are matrix @ C.T / m over the count
    matrices C of `_resample_counts` (or `counts`, those same matrices made once for several calls)."""
    g, m = matrix.shape
    out = np.empty((g, n_resamples), dtype=np.float64)
    lo = 0
    for chunk in counts if counts is not None else _resample_counts(m, n_resamples, seed):
        out[:, lo : lo + len(chunk)] = matrix @ chunk.T
        lo += len(chunk)
    out /= m
    return out


def percentiles(rows: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """`np.quantile(rows, quantiles, axis=1)` (its default, linear interpolation: Hyndman and Fan's 7th) of a matrix
    of finite numbers, equal to it to the last bit: the same order statistics found row by row where the rows lie in
    memory (numpy's own moves the axis first and partitions across rows: 2 s of a warm demo run's intervals), and
    numpy's own interpolation between them. Returns (len(quantiles), rows)."""
    rows = np.asarray(rows, dtype=np.float64)
    n = rows.shape[1]
    virtual = (n - 1) * np.asarray(quantiles, dtype=np.float64)
    if not n or np.isnan(rows).any() or (virtual < 0).any() or (virtual >= n - 1).any():
        return np.quantile(rows, quantiles, axis=1)
    below = np.floor(virtual).astype(np.intp)
    # every row sorted: numpy's vectorised sort (AVX-512 or AVX2) found 10,000 means' ends 3 to 7 times faster than
    # partitioning at four places did (2 to 7 times here: bench/summaries.py); the order statistics are the same numbers either way
    ordered = np.sort(rows, axis=1)
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
    block = max(1, CHUNK_BYTES // (8 * n_resamples))  # rows whose resample means are held at once
    blocks = []  # (each row's groups, the rows, their smallest and largest values, the resamples' counts or None)
    for m in np.unique(sizes[sizes > 0]).tolist():
        members = np.flatnonzero(sizes == m)
        matrix = v[starts[members][:, None] + np.arange(m)]
        lo_v, hi_v = matrix.min(axis=1), matrix.max(axis=1)
        low[members], high[members] = lo_v, hi_v
        varied = np.flatnonzero(lo_v < hi_v)  # one value, or all equal: (v, v)
        if not len(varied):
            continue
        # groups of one size share their resamples, so groups of the same values share their interval: each distinct
        # row is resampled once (two metrics that agree on every query, a setting that changes nothing here)
        rows, first, back = np.unique(matrix[varied], axis=0, return_index=True, return_inverse=True)
        back = back.ravel()
        order = np.argsort(back, kind="stable")
        bounds = np.searchsorted(back[order], np.arange(len(rows) + 1))
        groups_of = [members[varied[order[bounds[i] : bounds[i + 1]]]] for i in range(len(rows))]
        ends = lo_v[varied[first]], hi_v[varied[first]]
        n_blocks = -(-len(rows) // block)
        # the counts made once for all of this size's blocks, where they fit in one working matrix
        shared = n_blocks > 1 and m * n_resamples * 8 <= CHUNK_BYTES
        counts = list(_resample_counts(m, n_resamples, seed)) if shared else None
        for lo in range(0, len(rows), block):
            part = slice(lo, lo + block)
            blocks.append((groups_of[part], rows[part], ends[0][part], ends[1][part], counts))

    def interval(part):
        groups_of, rows, smallest, largest, counts = part
        q = percentiles(_bootstrap_means(rows, n_resamples, seed, counts), [alpha, 1.0 - alpha])
        # a mean lies within [min, max]; clipping removes rounding outside it
        q_low, q_high = np.clip(q[0], smallest, largest), np.clip(q[1], smallest, largest)
        times = [len(g) for g in groups_of]
        where = np.concatenate(groups_of)
        low[where], high[where] = np.repeat(q_low, times), np.repeat(q_high, times)

    if len(blocks) > 1 and isinstance(seed, (int, np.integer)):  # each block draws from its own seeded generator
        with ThreadPoolExecutor(min(BLOCK_THREADS, len(blocks))) as pool:  # numpy's sort and matmul run without the GIL
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
