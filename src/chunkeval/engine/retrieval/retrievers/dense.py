"""Exact cosine top-k over normalized vectors: a matrix product and a partial sort.

Ties are broken by chunk order (the lower chunk index ranks first), so results do not depend on the
sort algorithm. With `query_groups`/`chunk_groups` a query only sees the chunks of its own group
(its corpus); otherwise the chunks of every corpus in the run are pooled, as Chroma's evaluation does.

The scores of a block of queries against every chunk are one matrix product into a buffer reused from
block to block (BLAS rounds a score differently with the shape of the product, so the shape is kept:
`_BLOCK` queries by all chunks). The k best of a block are then chosen in column tiles: an exact partial
sort of the first tile, and in each further tile only the scores above the current k-th best of their
row (few, once the first tiles have been seen) are merged in. This is what faiss's heaps do, and costs
about one comparison per score instead of a partial sort of the whole row.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from chunkeval.errors import InputError

_BLOCK = 512  # queries per matrix product: bounds memory at BLOCK x n_chunks scores
_TILE = 8192  # chunk columns scanned at a time when choosing the k best of a block


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
    queries, chunks = np.asarray(queries), np.asarray(chunks)
    n_q, n_c = len(queries), len(chunks)
    width = min(k, n_c)
    index = np.full((n_q, k), -1, dtype=np.int64)
    score = np.full((n_q, k), -np.inf, dtype=np.float32)
    if n_c == 0 or n_q == 0:
        return index, score
    threads = _threads() if n_c > max(_TILE, width) and n_q > 1 else 1
    with ThreadPoolExecutor(threads) as pool:
        for lo, sims in score_blocks(queries, chunks):
            if query_groups is not None:
                _mask_other_groups(sims, query_groups[lo : lo + _BLOCK], chunk_groups)
            # The choice is per row: the rows of the block are shared among threads (numpy releases the GIL).
            parts = [slice(a[0], a[-1] + 1) for a in np.array_split(np.arange(len(sims)), threads) if len(a)]
            for part, (idx, val) in zip(parts, pool.map(lambda p: _select(sims[p], width), parts)):  # noqa: B023
                index[lo + part.start : lo + part.stop, :width] = idx
                score[lo + part.start : lo + part.stop, :width] = val
    index[~np.isfinite(score)] = -1
    return index, score


def score_blocks(queries: np.ndarray, chunks: np.ndarray):
    """(first query, scores of a block of queries against every chunk) for each block: one matrix
    product into a buffer reused from block to block (so a block's scores are good until the next is
    asked for). `top_k` and the bi-encoder reranker read the same products, bit for bit."""
    queries, chunks = np.asarray(queries), np.asarray(chunks)
    if len(queries) == 0 or len(chunks) == 0:
        return
    buffer = np.empty((min(_BLOCK, len(queries)), len(chunks)), dtype=np.result_type(queries.dtype, chunks.dtype))
    for lo in range(0, len(queries), _BLOCK):
        block = queries[lo : lo + _BLOCK]
        yield lo, np.matmul(block, chunks.T, out=buffer[: len(block)])  # BLAS uses every core here


def _threads() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _mask_other_groups(sims: np.ndarray, query_groups: np.ndarray, chunk_groups: np.ndarray) -> None:
    """-inf where a chunk is not of its query's group (a tile of columns at a time: a small mask)."""
    for c0 in range(0, sims.shape[1], _TILE):
        tile = sims[:, c0 : c0 + _TILE]
        tile[query_groups[:, None] != chunk_groups[None, c0 : c0 + _TILE]] = -np.inf


def _select(sims: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """What `_block_top(sims, width)` gives (the same chunks and scores wherever the score is a number other
    than ±inf, whose chunks `top_k` turns into -1), scanning the columns in tiles (see the module's docstring)."""
    first = max(_TILE, width)
    if sims.shape[1] <= first:
        return _block_top(sims, width)
    idx, val = _block_top(sims[:, :first], width)
    above = np.empty((len(sims), _TILE), dtype=bool)
    for c0 in range(first, sims.shape[1], _TILE):
        _merge_tile(sims[:, c0 : c0 + _TILE], c0, idx, val, above)
    # A NaN score stops the scan of its row (nothing is above it): such rows are chosen again, whole.
    redo = np.flatnonzero(np.isnan(val).any(axis=1)) if val.dtype.kind == "f" else ()
    if len(redo):
        idx[redo], val[redo] = _block_top(sims[redo], width)
    return idx, val


def _merge_tile(tile: np.ndarray, offset: int, idx: np.ndarray, val: np.ndarray, above: np.ndarray) -> None:
    """Merge into each row's k best (`idx`, `val`, ordered) the scores of `tile` (columns `offset`...) above its k-th.

    A score equal to the k-th best cannot enter: its chunk comes after every chunk already kept."""
    above = np.greater(tile, val[:, -1:], out=above[:, : tile.shape[1]])
    pos = np.flatnonzero(above)
    if not len(pos):
        return
    r, c = np.divmod(pos, tile.shape[1])
    width = idx.shape[1]
    many = np.bincount(r, minlength=len(tile)) > max(4 * width, tile.shape[1] // 32)
    if many.any():  # rows not full yet (all masked so far), or a tile of better scores: a partial sort first
        rows = np.flatnonzero(many)
        t_idx, t_val = _block_top(tile[rows], width)
        few = ~many[r]
        r = np.concatenate((r[few], np.repeat(rows, t_idx.shape[1])))
        c = np.concatenate((c[few], t_idx.ravel()))
    _merge(idx, val, r, c + offset, tile[r, c])


def _merge(idx: np.ndarray, val: np.ndarray, r: np.ndarray, new_idx: np.ndarray, new_val: np.ndarray) -> None:
    """Keep in the rows `r` of (`idx`, `val`) the best of their entries and of the new (`new_idx`, `new_val`)."""
    counts = np.bincount(r)
    rows = np.flatnonzero(counts)
    width = idx.shape[1]
    at = np.concatenate((np.repeat(rows, width), r))
    cand_idx = np.concatenate((idx[rows].ravel(), new_idx))
    cand_val = np.concatenate((val[rows].ravel(), new_val))
    order = np.lexsort((cand_idx, -cand_val, at))  # by row, then score, then chunk index
    sizes = counts[rows] + width
    keep = order[((np.cumsum(sizes) - sizes)[:, None] + np.arange(width)).ravel()]
    idx[rows] = cand_idx[keep].reshape(len(rows), width)
    val[rows] = cand_val[keep].reshape(len(rows), width)


def _block_top(sims: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the `width` best of each row, by score (NaN last), then column."""
    n = sims.shape[1]
    if width < n:
        part = np.argpartition(sims, n - width, axis=1)[:, n - width :]  # no negated copy of the scores
        if sims.dtype.kind == "f" and np.isnan(np.take_along_axis(sims, part, axis=1)).any():
            part = np.argpartition(-sims, width - 1, axis=1)[:, :width]  # NaN sorts last: it was taken as the best
    else:
        part = np.broadcast_to(np.arange(n), sims.shape).copy()
    vals = np.take_along_axis(sims, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)  # by score, then by chunk index
    idx = np.take_along_axis(part, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    # A tie across the cut may have let a later chunk in before an earlier one: redo those rows fully.
    kth = vals[:, -1]
    tied = np.flatnonzero(np.isfinite(kth) & (np.count_nonzero(sims >= kth[:, None], axis=1) > width))
    for row in tied:  # rare: exact score ties at the k-th place
        best = np.argsort(-sims[row], kind="stable")[:width]
        idx[row], vals[row] = best, sims[row, best]
    return idx, vals
