"""Macro and micro averages as one DuckDB SQL statement, for every place that aggregates per-query rows.

`chunkeval sweep` runs it over its in-memory Arrow table, the warehouse over the per-query Parquet
files of a run (per-corpus summaries of older runs) or of a period (`report --since 7d`). Definitions:
docs/metrics.md ("Averages"):

- macro: `avg` of the per-query value and its sample standard deviation (n − 1; NULL for one query);
- micro: the counts summed over the rows before dividing (0 where the denominator sums to 0), and for
  the F1s the harmonic mean of the micro precision and recall.

The bootstrap intervals are not SQL: `chunkeval.stats.summaries.mean_intervals` adds them to a summary.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from chunkeval.vocabulary import METRICS

# how each micro average is formed: micro average = sum(numerator) / sum(denominator)
MICRO = {
    "span_precision": ("covered", "retrieved_chars"),
    "span_recall": ("covered", "ref_chars"),
    "span_iou": ("covered", "retrieved_chars + uncovered"),
    "precision_omega": ("covered_all", "omega_union"),
    "precision": ("tp", "n_retrieved"),
    "recall": ("tp", "n_relevant"),
    "precision_at_k": ("hits_at_k", "k"),
    "recall_at_k": ("hits_at_k", "n_relevant"),
    "ann_recall_at_k": ("ann_found", "ann_depth"),
}
# the F1s: harmonic mean of the micro precision and recall
MICRO_F1 = {"span_f1": ("span_precision", "span_recall"), "f1": ("precision", "recall")}


def _ratio(num: str, den: str) -> str:
    return f"CASE WHEN {den} = 0 THEN 0.0 ELSE ({num})::DOUBLE / ({den}) END"


def _columns_of(expr: str) -> set[str]:
    return {part.strip() for part in expr.split("+")}


def summary_sql(
    source: str, by: list[str], columns: list[str], skip_empty_gold: bool = False, extra: tuple[str, ...] = ()
) -> str:
    """SELECT of the summary of `source` (a table name or a table function) grouped by `by`, for the
    metrics and counts among `columns` (a per-query table's column names). `extra` adds aggregate
    expressions (e.g. `count(DISTINCT run_id) AS n_runs`)."""
    have = set(columns)
    metrics = [m for m in METRICS if m in have]
    micro = {m: pair for m, pair in MICRO.items() if m in have and _columns_of(pair[0]) | _columns_of(pair[1]) <= have}
    inner = [*by, "count(query_id) AS n_queries"]
    for m in metrics:
        inner += [f"avg({m}) AS {m}_mean", f"stddev_samp({m}) AS {m}_std"]
    for m, (num, den) in micro.items():
        inner += [f"sum({num}) AS _{m}_num", f"sum({den}) AS _{m}_den"]
    if "retrieved_tokens" in have:
        inner.append("avg(retrieved_tokens) AS retrieved_tokens_mean")
    inner += list(extra)
    outer = [*by, "n_queries"]
    for m in metrics:
        outer += [f"{m}_mean", f"{m}_std"]
    micro_expr = {m: _ratio(f"_{m}_num", f"_{m}_den") for m in micro}
    for m in metrics:
        if m in micro_expr:
            outer.append(f"{micro_expr[m]} AS {m}_micro")
        elif m in MICRO_F1 and all(x in micro_expr for x in MICRO_F1[m]):
            p, r = (micro_expr[x] for x in MICRO_F1[m])
            outer.append(
                f"CASE WHEN ({p}) + ({r}) = 0 THEN 0.0 ELSE 2 * ({p}) * ({r}) / (({p}) + ({r})) END AS {m}_micro"
            )
    if "retrieved_tokens" in have:
        outer.append("retrieved_tokens_mean")
    outer += [e.rsplit(" AS ", 1)[1] for e in extra]
    where = "WHERE has_gold" if skip_empty_gold and "has_gold" in have else ""
    group = f"GROUP BY {', '.join(by)}" if by else ""
    order = f"ORDER BY {', '.join(by)}" if by else ""
    return f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {source} {where} {group}) {order}"


def summarize_table(per_query: pa.Table, by: list[str], skip_empty_gold: bool = False) -> pa.Table:
    """`summary_sql` over an Arrow table, in a private in-memory DuckDB."""
    con = duckdb.connect()
    try:
        con.register("per_query", per_query)
        return con.sql(summary_sql("per_query", by, per_query.column_names, skip_empty_gold)).to_arrow_table()
    finally:
        con.close()
