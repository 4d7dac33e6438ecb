"""`chunkeval sql`: one read-only query over the warehouse's tables and views, printed as a table, JSON or
CSV. The warehouse is held (read-only) only while the query runs, so a run waits for it seconds at most;
the query runs where DuckDB's settings let it read no other file and write none (docs/warehouse.md), for at
most `--timeout` seconds, and its rows stream out up to `--limit`."""

from __future__ import annotations

import argparse
import json
import math
import sys

from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.files import CsvRows
from chunkeval.limits import MAX_INT
from chunkeval.report.terminal import format_table
from chunkeval.warehouse.access import DEFAULT_SQL_TIMEOUT, MAX_SQL_TIMEOUT, check_sql_timeout

WAREHOUSE_SESSION = False  # the query opens its own read-only connection, for as long as it runs
DEFAULT_LIMIT = 10_000  # rows printed unless --limit says otherwise
TABLE_ROWS = 100_000  # the most rows of the aligned table, which holds them all to size its columns


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help="run one read-only SQL query over the warehouse and print its rows",
        description="Run one statement that only reads (SELECT, WITH …, EXPLAIN) over the warehouse's tables and "
        "views (runs, config_summary, corpus_summary, slice_summary, trend, query_results, gold_references, run_models; "
        "docs/warehouse.md). The warehouse is held only while the query runs: unlike a DuckDB session left "
        "open on chunkeval.duckdb, it never blocks a run for long. The query reads no file but the warehouse's "
        "and writes none, installs and loads no extension, and cannot change those settings.",
    )
    p.add_argument("query", metavar="SQL", help='the statement, e.g. "SELECT run_id, status FROM runs"')
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header line")
    p.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"print at most N rows, with a note on stderr when the query has more (default {DEFAULT_LIMIT}; "
        f"the table at most {TABLE_ROWS}, --csv and --json stream any number)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SQL_TIMEOUT,
        metavar="SECONDS",
        help=f"stop the query after SECONDS (default {DEFAULT_SQL_TIMEOUT:g}, at most {MAX_SQL_TIMEOUT:g})",
    )
    p.set_defaults(func=run)
    return p


def _plain(value):
    """A value of a row as JSON can hold it: times as ISO 8601, NaN as null, anything else as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _check_limit(args: argparse.Namespace) -> None:
    if not 1 <= args.limit <= MAX_INT:
        raise InputError(f"--limit must be at least 1 and at most {MAX_INT}, got {args.limit}")
    if not (args.json or args.csv) and args.limit > TABLE_ROWS:
        raise InputError(
            f"--limit {args.limit} is more rows than a table holds ({TABLE_ROWS}, aligned in memory): "
            "add --csv or --json, which stream"
        )


def _cut(batches, limit: int, cut: list[bool]):
    """The batches up to `limit` rows in all; `cut[0]` turns True when the query had more."""
    left = limit
    for batch in batches:
        if batch.num_rows > left:
            cut[0] = True
        yield batch.slice(0, left)
        left -= min(left, batch.num_rows)
        if left == 0:
            # one more non-empty batch (or none) says whether rows were left, reading no further
            cut[0] = cut[0] or next((b for b in batches if b.num_rows), None) is not None
            return


def _rows(batches):
    """Each row's values in column order (a name may repeat: `SELECT 1 AS a, 2 AS a`)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns))


def _write_json(names: list[str], batches) -> None:
    """A JSON list of row objects, as `print_json` writes one (indented by 2), written row by row."""
    out, first = sys.stdout, True
    for values in _rows(batches):
        text = json.dumps({k: _plain(v) for k, v in zip(names, values)}, indent=2)
        out.write(("[\n" if first else ",\n") + "\n".join("  " + line for line in text.splitlines()))
        first = False
    out.write("[]\n" if first else "\n]\n")


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_sql_timeout(args.timeout)
    _check_limit(args)
    cut = [False]
    with warehouse().query(args.query, args.timeout) as (schema, batches):
        shown = _cut(batches, args.limit, cut)
        if args.json:
            _write_json(schema.names, shown)
        elif args.csv:
            writer = CsvRows(sys.stdout)
            writer.writerow(schema.names)
            for values in _rows(shown):
                writer.writerow(["" if v is None else v for v in values])
        else:
            import pyarrow as pa

            table = pa.Table.from_batches(list(shown), schema=schema)
            print(format_table(table))
            print(f"({table.num_rows} row(s))")
    if cut[0]:
        print(
            f"chunkeval: note: the first {args.limit} rows are shown; the query has more (--limit N)", file=sys.stderr
        )
    return 0
