"""`chunkeval sql`: one read-only query over the warehouse's tables and views, printed as a table, JSON or
CSV. The warehouse is held (read-only) only while the query runs, so a run waits for it seconds at most."""

from __future__ import annotations

import argparse
import csv
import sys

from chunkeval.cli.output import print_json
from chunkeval.cli.session import WarehouseAccess

WAREHOUSE_SESSION = False  # the query opens its own read-only connection, for as long as it runs


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run one read-only SQL query over the warehouse and print its rows",
        description="Run one statement that only reads (SELECT, WITH …, EXPLAIN) over the warehouse's tables and "
        "views (runs, config_summary, corpus_summary, slice_summary, trend, query_results, gold_references, run_models; "
        "docs/warehouse.md). The warehouse is held only while the query runs: unlike a DuckDB session left "
        "open on chunkeval.duckdb, it never blocks a run for long.",
    )
    p.add_argument("query", metavar="SQL", help='the statement, e.g. "SELECT run_id, status FROM runs"')
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header line")
    p.set_defaults(func=run)
    return p


def _plain(value):
    """A value of a row as JSON can hold it: times as ISO 8601, NaN as null, anything else as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if value != value else value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    table = warehouse().read_query(args.query)
    if args.json:
        print_json([{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()])
    elif args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(table.column_names)
        for row in table.to_pylist():
            writer.writerow(["" if v is None else v for v in row.values()])
    else:
        from chunkeval.report.terminal import format_table

        print(format_table(table))
        print(f"({table.num_rows} row(s))")
    return 0
