"""Reciprocal rank fusion: score(chunk) = sum over the lists that hold it of 1 / (c + rank), rank from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunkeval.engine.retrieval.retrievers._rank import sparse_top_positive

RRF_K = 60
FUSE_DEPTH = 1000
_BLOCK = 512  # queries fused at a time; memory follows their lists' entries, never queries x chunks


def rrf(lists: Sequence[np.ndarray], n_chunks: int, k: int, c: float = RRF_K) -> np.ndarray:
    """Fused top-k (int64, n_queries x k, -1 padded) of ranked lists of chunk indices (each n_queries x depth,
    -1 padded, no chunk twice in a row). Equal fused scores rank the lower chunk index first."""
    return rrf_ranked(lists, n_chunks, k, c)[0]


def rrf_ranked(lists: Sequence[np.ndarray], n_chunks: int, k: int, c: float = RRF_K) -> tuple[np.ndarray, np.ndarray]:
    """`rrf`, and the fused score of each chunk it ranks (float64, NaN in the padding)."""
    import scipy.sparse as sp  # imported when used, as bm25 does: reading results never needs it

    n_q = len(lists[0])
    index = np.full((n_q, k), -1, dtype=np.int64)
    values = np.full((n_q, k), np.nan)
    for lo in range(0, n_q, _BLOCK):
        n = min(_BLOCK, n_q - lo)
        keys, terms = [], []  # (row, chunk) as one number, and its term 1 / (c + rank), list after list
        for ranked in lists:
            part = ranked[lo : lo + n]
            row, pos = np.nonzero(part >= 0)
            keys.append(row * np.int64(n_chunks) + part[row, pos])
            terms.append(1.0 / (c + pos + 1))
        cells, where = np.unique(np.concatenate(keys), return_inverse=True)
        fused = np.zeros(len(cells))
        np.add.at(fused, where, np.concatenate(terms))  # in list order: the sums a dense add gives, bit for bit
        matrix = sp.csr_matrix((fused, (cells // n_chunks, cells % n_chunks)), shape=(n, n_chunks))
        index[lo : lo + n], values[lo : lo + n] = sparse_top_positive(matrix, k)
    return index, values
