"""Reciprocal rank fusion: score(chunk) = sum over the lists that hold it of 1 / (c + rank), rank from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunkeval.engine.retrievers._rank import top_positive

RRF_K = 60
FUSE_DEPTH = 1000
_BLOCK = 512  # queries fused at a time: bounds memory at BLOCK x n_chunks float64 scores


def rrf(lists: Sequence[np.ndarray], n_chunks: int, k: int, c: float = RRF_K) -> np.ndarray:
    """Fused top-k (int64, n_queries x k, -1 padded) of ranked lists of chunk indices (each n_queries x depth,
    -1 padded, no chunk twice in a row). Equal fused scores rank the lower chunk index first."""
    return rrf_ranked(lists, n_chunks, k, c)[0]


def rrf_ranked(lists: Sequence[np.ndarray], n_chunks: int, k: int, c: float = RRF_K) -> tuple[np.ndarray, np.ndarray]:
    """`rrf`, and the fused score of each chunk it ranks (float64, NaN in the padding)."""
    n_q = len(lists[0])
    index = np.full((n_q, k), -1, dtype=np.int64)
    values = np.full((n_q, k), np.nan)
    for lo in range(0, n_q, _BLOCK):
        fused = np.zeros((min(_BLOCK, n_q - lo), n_chunks))
        for ranked in lists:
            part = ranked[lo : lo + _BLOCK]
            row, pos = np.nonzero(part >= 0)
            fused[row, part[row, pos]] += 1.0 / (c + pos + 1)
        index[lo : lo + len(fused)], values[lo : lo + len(fused)] = top_positive(fused, k)
    return index, values
