"""`chunkeval sweep`: a grid of chunking settings and k scored on a span gold set or document qrels, written to files."""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa

from chunkeval.cli.commands import summary
from chunkeval.cli.options import (
    add_experiment_flags,
    add_metric_flags,
    experiment_from_args,
    experiment_inputs,
    metric_flags,
)
from chunkeval.cli.output import print_prose
from chunkeval.cli.session import WarehouseAccess
from chunkeval.engine.pipeline.grid import Consent, terminal_confirm
from chunkeval.engine.pipeline.prepare import prepare
from chunkeval.engine.pipeline.sweep import run_steps
from chunkeval.engine.scoring.doc_metrics import write_doc_runs
from chunkeval.errors import InputError
from chunkeval.files import check_output, check_writable_dir, write_tables
from chunkeval.paths import cache_dir
from chunkeval.progress import show_progress
from chunkeval.report.terminal import (
    approximate,
    beside,
    check_table_path,
    fold,
    format_index_costs,
    format_models,
    format_slices,
    summary_block,
)
from chunkeval.vocabulary import CONFIG_KEYS, config_id_sql, config_label_sql
from chunkeval.warehouse import Warehouse

WAREHOUSE_SESSION = False  # a sweep records nothing (a large grid's estimate reads past throughput, if any)


def labelled(table: pa.Table) -> pa.Table:
    """`table` with each row's configuration named as every command names it: `label` and `config_id` after its
    configuration keys, computed by the very expressions of the warehouse's views (`config_label_sql`,
    `config_id_sql`), so that a written result joins what the sweep printed and what the warehouse holds."""
    import duckdb

    if not set(CONFIG_KEYS) <= set(table.column_names) or {"label", "config_id"} & set(table.column_names):
        return table
    con = duckdb.connect()
    con.register("t", table.append_column("_row", pa.array(range(table.num_rows), pa.int64())))
    named = con.sql(
        f"SELECT {config_label_sql()} AS label, {config_id_sql()} AS config_id FROM t ORDER BY _row"
    ).to_arrow_table()  # in the table's own order, whatever DuckDB's threads do
    at = max(table.column_names.index(k) for k in CONFIG_KEYS) + 1
    for i, name in enumerate(("label", "config_id")):
        table = table.add_column(at + i, name, named[name])
    return table


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sweep",
        help=summary("sweep"),
        description="Score every (chunker, chunk size, overlap, k) on a span gold set or document qrels (--beir, "
        "--qrels). Writes the summary to --out, the per-query table to <out>.per_query, the per-corpus summary to "
        "<out>.by_corpus, with --slice-by the per-slice summary to <out>.by_slice and, for document qrels, each "
        "configuration's document ranking to <out>.doc_runs/.",
    )
    add_experiment_flags(p)
    p.add_argument("--out", required=True, help="summary file, .csv or .parquet")
    add_metric_flags(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    metric_flags(args)  # the summary's columns, checked before any work
    check_table_path(args.out)  # its suffix and folder, before the experiment is read
    exp = experiment_from_args(args)
    inputs = experiment_inputs(args, exp)
    out = check_table_path(args.out, inputs)  # each file resolved apart: a link replaces the file it names
    named = Path(args.out)
    beside_out = {part: check_output(beside(named, part), inputs) for part in ("per_query", "by_corpus", "by_slice")}
    doc_runs = check_output(named.with_name(f"{named.stem}.doc_runs"), inputs, folder="into")
    if len({out, *beside_out.values()}) < 1 + len(beside_out):  # links that make two of them one file
        raise InputError("--out and its companion files (.per_query, .by_corpus, .by_slice) name one file twice", out)
    check_writable_dir(cache_dir(), "the embedding cache ($CHUNKEVAL_HOME)")
    consent = Consent(args.yes, terminal_confirm(), "--yes", throughput=lambda: Warehouse.at_home().model_throughput())
    with show_progress():  # as run shows it: a bar on a terminal, off one a line at least every 10 s
        state = prepare(exp, batch_size=args.batch_size, device=args.device, consent=consent)
        result = run_steps(state)
    tables = {
        out: result.summary,
        beside_out["per_query"]: result.per_query,
        beside_out["by_corpus"]: result.by_corpus,
    }
    if result.by_slice is not None:
        tables[beside_out["by_slice"]] = result.by_slice
    write_tables({path: labelled(table) for path, table in tables.items()})
    for note in result.notes:
        print_prose(f"note: {note}")
    doc_runs = write_doc_runs(result.per_query, doc_runs)
    print(summary_block(result.summary, result.per_query, args.metrics, args.wide))
    truncated = sum(result.summary["truncated_chunks"].to_pylist()) // max(len(exp.k), 1)
    embedded = f"{result.texts_embedded} text(s) embedded; " if exp.needs_model() else ""  # said where a model ran
    cut = (
        f"{truncated} chunk(s) longer than the model's input were embedded from their beginning; " if truncated else ""
    )
    print("\n" + fold(f"{embedded}{cut}results in {out} and " + ", ".join(p.name for p in list(tables)[1:])))
    if result.by_slice is not None:
        print(format_slices(result.by_slice))
    if doc_runs:
        print(f"document rankings (MaxP, top k) as TREC run files: {doc_runs}")
    if result.models.num_rows:
        print(format_models(result.models))
    if approximate(result.summary):
        print("\nindexes (build seconds, size, and milliseconds per query: one at a time p50/p95, and batched)")
        print(format_index_costs(result.summary, CONFIG_KEYS))
    return 0
