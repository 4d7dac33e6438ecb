"""Top-k of score rows in which a score of 0 or less means "not retrieved"."""

from __future__ import annotations

import numpy as np

from chunkeval.engine.retrievers.dense import _block_top


def top_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64, n_rows x k) of the k best positive scores per row, ties to the lower index, -1 padded;
    and their scores (float64, NaN in the padding)."""
    width = min(k, scores.shape[1])
    index = np.full((len(scores), k), -1, dtype=np.int64)
    values = np.full((len(scores), k), np.nan)
    if width == 0 or len(scores) == 0:
        return index, values
    scores = np.where(scores > 0, scores, -np.inf)
    idx, val = _block_top(scores, width)
    found = np.isfinite(val)
    idx[~found] = -1
    index[:, :width] = idx
    values[:, :width] = np.where(found, val, np.nan)
    return index, values
