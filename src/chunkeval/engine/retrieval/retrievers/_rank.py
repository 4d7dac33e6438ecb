"""Top-k of sparse score rows, in which a score not stored (0), or of 0 or less, means "not retrieved"."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp


def sparse_top_positive(scores: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64, n_rows x k) of the k best positive scores per row of a sparse matrix (an entry not stored
    is 0: never retrieved), ties to the lower column, -1 padded; and their scores (float64, NaN in the padding).
    Read from the stored entries of each row alone: the work and memory follow the entries, not rows x columns."""
    index = np.full((scores.shape[0], k), -1, dtype=np.int64)
    values = np.full((scores.shape[0], k), np.nan)
    bounds = scores.indptr
    for row in range(scores.shape[0]):  # one row's entries at a time, each step vectorised over them
        vals, cols = scores.data[bounds[row] : bounds[row + 1]], scores.indices[bounds[row] : bounds[row + 1]]
        positive = vals > 0
        vals, cols = vals[positive], cols[positive].astype(np.int64)
        if len(vals) > k:  # those above the k-th best, then the lowest columns of those equal to it
            kth = np.partition(vals, len(vals) - k)[len(vals) - k]
            above, tied = np.flatnonzero(vals > kth), np.flatnonzero(vals == kth)
            keep = np.concatenate((above, tied[np.argsort(cols[tied], kind="stable")[: k - len(above)]]))
            vals, cols = vals[keep], cols[keep]
        order = np.lexsort((cols, -vals))  # by score, then by column
        index[row, : len(order)] = cols[order]
        values[row, : len(order)] = vals[order]
    return index, values
