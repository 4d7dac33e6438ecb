"""Westfall and Young's step-down max-T over paired sign flips: adjusted p-values for a family of paired checks
that share their questions (every metric × configuration × slice of two runs), controlling the family-wise error
rate while counting checks that move together once. Definitions: docs/statistics.md ("Step-down max-T").

The family is a matrix of paired differences, one row per question and one column per check; NaN where a check
lacks the question (one run lacks it, or the metric is NULL there). A resample flips the sign of each question's
differences, the same sign in every check (so the checks' dependence is kept); each check's statistic is the
two-sided paired t statistic of its own questions, |mean(s·d)| / (sd(s·d) / √n). A check's adjusted p-value is the
share of resamples whose largest statistic over the checks at most as significant as it (it included) reaches its
observed statistic, made monotone in the order of significance (Westfall and Young, 1993, algorithm 2.8).

Vectorised: the sign flips are one matrix per chunk of resamples, the statistics one matrix product with the
differences; nothing loops over questions, checks or resamples one at a time. Seeded: the same inputs and seed
give the same p-values. Up to `EXACT_MAX_N` questions every sign flip is enumerated (no randomness)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunkeval.errors import InputError
from chunkeval.stats.resampling import CHUNK_BYTES, _check_resamples, _rows_per_chunk
from chunkeval.stats.tests import EXACT_MAX_N, sign_flips

PROCEDURE = "step-down max-T"  # the family-wise correction's name, as a verdict line gives it
# a resampled statistic within this relative distance of the observed one counts as reaching it (rounding of sums
# taken in another order must not lose the tie of a flip that gives the observed statistic again)
RELATIVE_TIE = 1e-9


@dataclass(frozen=True)
class MaxT:
    """The adjusted p-values (one per check, in the order given), each check's observed two-sided t statistic and
    number of questions, and the resamples they came from (`exact`: all 2^N sign flips of N questions)."""

    adjusted: np.ndarray
    t: np.ndarray
    n: np.ndarray
    n_resamples: int
    exact: bool


def abs_t(sums: np.ndarray, squares: np.ndarray, n: np.ndarray) -> np.ndarray:
    """|t| of paired differences from their sums (rows: resamples; columns: checks), their sums of squares and
    numbers (per check). A flip does not change the sum of squares, so t needs only the flipped sum:
    t = mean / √((Σd² − n·mean²) / (n(n − 1))). No spread left: ∞ where the mean is not 0 (every difference the same
    non-zero value: `paired_ttest` gives p = 0), else 0 (every difference 0: p = 1)."""
    # the same operations in the same order as `squares - sums * sums / n` and `|sums| / n / √(resid / (n(n − 1)))`,
    # in place: equal to the bit, in less than half the time over a verdict's 10,000 × 320 statistics
    resid = sums * sums
    resid /= n
    np.subtract(squares, resid, out=resid)
    flat = resid <= 1e-12 * squares  # rounding of equal differences leaves a residue of ~1e-16 of Σd²
    with np.errstate(divide="ignore", invalid="ignore"):
        resid /= n * (n - 1)
        np.sqrt(resid, out=resid)
        t = np.abs(sums)
        t /= n
        t /= resid
    if flat.any():
        t[flat] = np.where(sums[flat] != 0, np.inf, 0.0)
    return t


def _sign_chunks(n: int, n_resamples: int, seed):
    """The sign flips, in chunks of rows (±1.0, resamples × questions): every one of the 2^n flips for
    n ≤ EXACT_MAX_N, else `n_resamples` random ones drawn as `paired_permutation` draws them (the same seed gives
    a single check the same flips, and so its p-value)."""
    rows = _rows_per_chunk(n)
    if n <= EXACT_MAX_N:
        for lo in range(0, 2**n, rows):
            bits = (np.arange(lo, min(2**n, lo + rows))[:, None] >> np.arange(n)) & 1
            yield (1 - 2 * bits).astype(np.float64)
        return
    yield from sign_flips(n, n_resamples, seed)


def maxt_adjusted(diffs, n_resamples: int = 10_000, seed=0) -> MaxT:
    """Westfall–Young step-down max-T adjusted p-values of every column of `diffs` (questions × checks; NaN where a
    check lacks a question). Every check needs at least 2 questions. With N questions in all: N ≤ EXACT_MAX_N
    enumerates the 2^N sign flips, p = #{flips reaching it} / 2^N; otherwise `n_resamples` random flips (seeded)
    and the add-one estimate (1 + #{resamples reaching it}) / (1 + n_resamples)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2:
        raise InputError(f"differences must be a matrix of questions × checks, got shape {d.shape}")
    n_resamples = _check_resamples(n_resamples)
    kept = ~np.isnan(d)
    n = kept.sum(axis=0).astype(np.float64)
    if d.shape[1] == 0:
        return MaxT(np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), 0, False)
    if n.min() < 2:
        raise InputError(f"every check needs at least 2 paired questions, got {int(n.min())}")
    d = np.where(kept, d, 0.0)  # a question a check lacks adds 0 to its sums, flipped or not
    squares = (d * d).sum(axis=0)
    observed = abs_t(np.ones((1, d.shape[0])) @ d, squares, n)[0]
    order = np.argsort(-observed, kind="stable")  # the most significant first
    d, squares, n_sorted = d[:, order], squares[order], n[order]
    bar = observed[order] * (1 - RELATIVE_TIE)
    reached = np.zeros(d.shape[1], dtype=np.int64)
    block = max(1, CHUNK_BYTES // (8 * d.shape[1]))  # resamples whose statistics are held at once
    exact = d.shape[0] <= EXACT_MAX_N
    for signs in _sign_chunks(d.shape[0], n_resamples, seed):
        for lo in range(0, len(signs), block):
            t = abs_t(signs[lo : lo + block] @ d, squares, n_sorted)
            # the largest statistic over each check and every check less significant than it
            successive = np.maximum.accumulate(t[:, ::-1], axis=1)[:, ::-1]
            reached += np.count_nonzero(successive >= bar, axis=0)
    total = 2 ** d.shape[0] if exact else n_resamples
    p = reached / total if exact else (1 + reached) / (1 + n_resamples)
    adjusted = np.empty(len(p))
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(p))
    return MaxT(adjusted, observed, n.astype(np.int64), total, exact)
