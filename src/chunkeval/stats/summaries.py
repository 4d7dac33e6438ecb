"""Summaries of per-query tables: the macro and micro averages of `chunkeval.stats.aggregate`'s SQL, and
the 95 % bootstrap interval of each macro mean. What a sweep, a run file's score and the warehouse (a run
recorded without its per-corpus summary) all form the same way."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.stats import aggregate as AGG
from chunkeval.stats.resampling import bootstrap_ci_groups
from chunkeval.vocabulary import METRICS, MIN_SLICE_QUERIES, SLICE_KEYS


def summarize(per_query: pa.Table, by: list[str], intervals: bool = True) -> pa.Table:
    """Macro (mean, sample std with n - 1, and a 95 % percentile-bootstrap interval of the mean, 10,000
    resamples of the queries, seeded) and micro averages of every metric present, grouped by `by`: the
    SQL of `chunkeval.stats.aggregate`, which the warehouse runs too, then the intervals.

    Rows whose `has_gold` is false are left out (the `--skip-empty-gold` behaviour) when that column exists.
    """
    table = per_query
    if "has_gold" in table.column_names:
        table = table.filter(pc.field("has_gold"))
    out = AGG.summarize_table(table, by)
    if intervals:
        metrics = [m for m in METRICS if m in table.column_names]
        for name, column in mean_intervals(table, out, by, metrics).items():
            out = out.append_column(name, column)
    return out


def summarize_slices(per_query: pa.Table, slices: pa.Table, by: list[str]) -> pa.Table:
    """`summarize` per `by` and slice: each query's rows once for every slice it belongs to (`slices`: query_id,
    slice_column, slice_value), and `too_small`, true where a slice has fewer than MIN_SLICE_QUERIES queries
    (shown, never tested). A slice without a query here has no row."""
    joined = per_query.join(slices, "query_id", join_type="inner")
    keys = [*by, *SLICE_KEYS]
    out = summarize(joined, keys).sort_by([(k, "ascending") for k in keys])
    return out.append_column("too_small", pc.less(out["n_queries"], MIN_SLICE_QUERIES))


def _key_strings(table: pa.Table, by: list[str]) -> pa.Array:
    parts = [pc.fill_null(pc.cast(table[k], pa.string()), "\x00") for k in by]  # a null key is a key too
    return pc.binary_join_element_wise(*parts, "\x1f") if len(parts) > 1 else parts[0]


def mean_intervals(table: pa.Table, grouped: pa.Table, by: list[str], metrics: list[str]) -> dict[str, pa.Array]:
    """`<metric>_ci_low` and `<metric>_ci_high` for every group row of `grouped`: one batched bootstrap
    over every metric and group (groups of one size share their resamples; docs/statistics.md)."""
    if not metrics or table.num_rows == 0:
        return {}
    keys = pc.dictionary_encode(_key_strings(table, by)).combine_chunks()
    codes = keys.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n = len(keys.dictionary)
    values = np.concatenate([table[m].to_numpy(zero_copy_only=False).astype(np.float64) for m in metrics])
    groups = np.concatenate([codes + i * n for i in range(len(metrics))])
    low, high = bootstrap_ci_groups(values, groups, n_groups=n * len(metrics))
    row = pc.index_in(_key_strings(grouped, by), value_set=keys.dictionary).to_numpy(zero_copy_only=False)
    out = {}
    for i, m in enumerate(metrics):
        out[f"{m}_ci_low"] = pa.array(low[i * n + row], from_pandas=True)  # NaN (a metric of no row) is null
        out[f"{m}_ci_high"] = pa.array(high[i * n + row], from_pandas=True)
    return out
