"""Which rows of a per-query table pair with which: its configurations (the distinct tuples of configuration
keys, in table order) and, where every configuration answered every question once, the grid of row numbers
(questions × configurations) that pairs them. Vectorized over every question × configuration: what the
comparisons, the ties, the decision and the power figures of a run read their paired values through."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.stats.columns import numbers
from chunkeval.vocabulary import CONFIG_KEYS as KEYS

_MEMO: dict[int, tuple[weakref.ref, dict]] = {}  # id(table) → (the table, what was found of it)


def _of_table(table: pa.Table, what: tuple, find: Callable):
    """`find()`, once per table (kept while the table lives): a report asks the configurations and the grid of
    one run's rows for every metric and section, and an Arrow table never changes."""
    entry = _MEMO.get(id(table))
    if entry is None or entry[0]() is not table:
        entry = (weakref.ref(table, lambda _, key=id(table): _MEMO.pop(key, None)), {})
        _MEMO[id(table)] = entry
    if what not in entry[1]:
        entry[1][what] = find()
    return entry[1][what]


def configurations(per_query: pa.Table, keys=KEYS) -> list[dict]:
    """The configurations of a per-query table, in table order."""
    present = tuple(k for k in keys if k in per_query.column_names)
    return [
        dict(c) for c in _of_table(per_query, ("configurations", present), lambda: _configurations(per_query, present))
    ]


def _configurations(per_query: pa.Table, present: tuple[str, ...]) -> list[dict]:
    if not present or not per_query.num_rows:
        return []
    _, first = distinct_rows([per_query[k] for k in present])
    return per_query.select(list(present)).take(pa.array(first)).to_pylist()


def codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Each row's index into the column's distinct values (a NULL is a value), and those values."""
    encoded = pc.dictionary_encode(
        column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column, null_encoding="encode"
    )
    return numbers(encoded.indices).astype(np.int64), encoded.dictionary


def distinct_rows(columns: list) -> tuple[np.ndarray, np.ndarray]:
    """Each row's index among the distinct rows of `columns` (rows equal in every column are one), numbered in
    the order they first appear, and the first row of each: vectorized, for tables of every question × every
    configuration."""
    code, size = np.zeros(len(columns[0]), dtype=np.int64), 1
    for column in columns:  # one number per row: its codes in mixed radix (a grid has far fewer than 2**62 rows)
        values, distinct = codes(column)
        code, size = code + values * size, size * max(len(distinct), 1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def query_grid(per_query: pa.Table) -> np.ndarray | None:
    """Row numbers (queries × configurations, both in order: sorted query ids, `configurations` order)
    when every configuration has every query once; else None. Read-only: one array serves every caller."""
    return _of_table(per_query, ("grid",), lambda: _query_grid(per_query))


def _query_grid(per_query: pa.Table) -> np.ndarray | None:
    present = [k for k in KEYS if k in per_query.column_names]
    if not present or per_query.num_rows < 2:
        return None
    config, first = distinct_rows([per_query[k] for k in present])
    query, ids = codes(per_query["query_id"])
    named = ids.to_pylist()
    sorted_ids = np.empty(len(named), dtype=np.int64)  # a query's place among the ids sorted as Python sorts them
    sorted_ids[sorted(range(len(named)), key=named.__getitem__)] = np.arange(len(named))
    n_queries, n_configs = len(named), len(first)
    cell = sorted_ids[query] * n_configs + config
    if n_queries < 2 or per_query.num_rows != n_queries * n_configs or (np.bincount(cell) != 1).any():
        return None  # some configuration lacks a question, or has one twice
    grid = np.empty(n_queries * n_configs, dtype=np.int64)
    grid[cell] = np.arange(per_query.num_rows)
    grid.flags.writeable = False
    return grid.reshape(n_queries, n_configs)


def grid_means(column: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each configuration's mean of `column` over its rows of the grid, summed in table order (as `within_run` sums
    them, so that the same configuration is the best whichever of them asks)."""
    return np.array([np.nanmean(column[np.sort(grid[:, j])]) for j in range(grid.shape[1])])
