"""`chunkeval sql`: one read-only query over the warehouse's tables and views, printed as a table, JSON or
CSV. The warehouse is held (read-only) only while the query runs, so a run waits for it seconds at most;
the query runs where DuckDB's settings let it read no other file and write none (docs/warehouse.md), for at
most `--timeout` seconds, and its rows stream out up to `--limit`."""

from __future__ import annotations

import argparse
import json
import math
import sys

from chunkeval.cli.commands import summary
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.files import CsvRows
from chunkeval.limits import MAX_INT, capped_memory
from chunkeval.report.terminal import TERMINAL_WIDTH, format_table
from chunkeval.warehouse.access import DEFAULT_SQL_TIMEOUT, MAX_SQL_TIMEOUT, check_sql_timeout

WAREHOUSE_SESSION = False  # the query opens its own read-only connection, for as long as it runs
DEFAULT_LIMIT = 10_000  # rows printed unless --limit says otherwise
TABLE_ROWS = 100_000  # the most rows of the aligned table, which holds them all to size its columns
# the Python side of the memory cap (docs/limits.md): rows become Python values and text at most BATCH_BYTES of
# Arrow data at a time; one row of more than ROW_BYTES is refused, and the aligned table holds at most TABLE_BYTES
BATCH_BYTES = 32 << 20
ROW_BYTES = 16 << 20
TABLE_BYTES = 64 << 20
# the whole command's private memory (RLIMIT_DATA, Linux: it counts what DuckDB's and Arrow's allocators reserve,
# about three times what they touch) beyond what it had: DuckDB's `memory_limit` does not account every scalar
# function's intermediates (`SELECT range(0, 150000000)` took 13.5 GB before any row reached Python)
COMMAND_BYTES = 4 << 30


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sql",
        help=summary("sql"),
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
    p.add_argument("--wide", action="store_true", help="one table as wide as its columns (else panels of 120 columns)")
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


def _budgeted(batches, budget: int = BATCH_BYTES):
    """The batches cut into slices of at most `budget` bytes of Arrow data, each made Python values only then: a
    query's rows never take more than that at once outside DuckDB. A row of more than `ROW_BYTES` is refused in
    one line (`SELECT repeat('x', 400000000)` once took 3.2 GB)."""
    row = 0
    for batch in batches:
        pending = [batch]
        while pending:
            part = pending.pop()
            if part.nbytes <= budget or part.num_rows <= 1:
                if part.num_rows == 1 and part.nbytes > ROW_BYTES:
                    raise InputError(
                        f"row {row + 1} of the result holds {part.nbytes / (1 << 20):,.0f} MiB, more than the "
                        f"{ROW_BYTES >> 20} MiB a printed row may (docs/limits.md): select less of it "
                        "(substr, length, count)"
                    )
                row += part.num_rows
                yield part
                continue
            half = part.num_rows // 2
            pending += [part.slice(half), part.slice(0, half)]  # the first half first


def _rows(batches):
    """Each row's values in column order (a name may repeat: `SELECT 1 AS a, 2 AS a`)."""
    for batch in _budgeted(batches):
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
    try:
        with capped_memory(COMMAND_BYTES):  # the whole command: DuckDB, Arrow and the rows printed
            return _run(args, warehouse)
    except (MemoryError, OSError) as exc:  # DuckDB's Arrow conversion says Out of Memory as an OSError
        if not isinstance(exc, MemoryError) and "out of memory" not in str(exc).lower():
            raise
        raise InputError(
            f"the query needs more memory than the {COMMAND_BYTES >> 30} GiB this command may take (docs/limits.md): "
            "select fewer or smaller values"
        ) from None


def _run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
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

            kept, size = [], 0
            for batch in _budgeted(shown):
                size += batch.nbytes
                if size > TABLE_BYTES:
                    raise InputError(
                        f"the rows hold more than the {TABLE_BYTES >> 20} MiB a table aligns in memory: add --csv or "
                        "--json, which stream"
                    )
                kept.append(batch)
            table = pa.Table.from_batches(kept, schema=schema)
            print(format_table(table, None if args.wide else TERMINAL_WIDTH))
            print(f"({table.num_rows} row(s))")
    if cut[0]:
        print(
            f"chunkeval: note: the first {args.limit} rows are shown; the query has more (--limit N)", file=sys.stderr
        )
    return 0
