"""Arrow columns as numpy without pyarrow's own conversion, which imports pandas (half a second of CPU,
twice the rest of a history command's imports) to convert even a column of numbers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def numbers(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A column of numbers as numpy: its own dtype when it has no NULL (the buffers, copied once), else
    float64 with NULL as NaN. A column of anything else as Python objects (NULL as None)."""
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return np.asarray(column.to_pylist(), dtype=object)
    if column.null_count:
        return np.asarray(column.to_pylist(), dtype=np.float64)  # None becomes NaN
    dtype = np.dtype(kind.to_pandas_dtype())
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [np.frombuffer(c.buffers()[1], dtype=dtype)[c.offset : c.offset + len(c)] for c in chunks if len(c)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
