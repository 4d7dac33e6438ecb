"""Exact cosine top-k over normalized vectors: a matrix product and a partial sort.

Ties are broken by chunk order (the lower chunk index ranks first), so results do not depend on the
sort algorithm. With `query_groups`/`chunk_groups` a query only sees the chunks of its own group
(its corpus); otherwise the chunks of every corpus in the run are pooled, as Chroma's evaluation does.
"""

from __future__ import annotations

import numpy as np

from chunkeval.errors import InputError

_BLOCK = 512  # queries per matrix product: bounds memory at BLOCK x n_chunks scores


def top_k(
    queries: np.ndarray,
    chunks: np.ndarray,
    k: int,
    query_groups: np.ndarray | None = None,
    chunk_groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64, -1 where fewer than k chunks exist) and scores (float32, -inf there) of the k best chunks."""
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    n_q, n_c = len(queries), len(chunks)
    width = min(k, n_c)
    index = np.full((n_q, k), -1, dtype=np.int64)
    score = np.full((n_q, k), -np.inf, dtype=np.float32)
    if n_c == 0 or n_q == 0:
        return index, score
    for lo in range(0, n_q, _BLOCK):
        sims = queries[lo:lo + _BLOCK] @ chunks.T
        if query_groups is not None:
            sims[query_groups[lo:lo + _BLOCK, None] != chunk_groups[None, :]] = -np.inf
        idx, val = _block_top(sims, width)
        index[lo:lo + len(sims), :width] = idx
        score[lo:lo + len(sims), :width] = val
    index[~np.isfinite(score)] = -1
    return index, score


def _block_top(sims: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    if width < sims.shape[1]:
        part = np.argpartition(-sims, width - 1, axis=1)[:, :width]
    else:
        part = np.broadcast_to(np.arange(sims.shape[1]), sims.shape).copy()
    vals = np.take_along_axis(sims, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)  # by score, then by chunk index
    idx = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    # A tie across the cut may have let a later chunk in before an earlier one: redo those rows fully.
    kth = vals[:, -1]
    tied = np.flatnonzero(np.isfinite(kth) & ((sims >= kth[:, None]).sum(axis=1) > width))
    for row in tied:  # rare: exact score ties at the k-th place
        best = np.argsort(-sims[row], kind="stable")[:width]
        idx[row], vals[row] = best, sims[row, best]
    return idx, vals
