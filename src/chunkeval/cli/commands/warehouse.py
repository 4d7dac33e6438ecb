"""`chunkeval warehouse repair`: a damaged catalogue rebuilt from the run manifests and pins;
`chunkeval warehouse snapshot OUT.duckdb`: a self-contained copy to explore without holding runs up."""

from __future__ import annotations

import argparse

from chunkeval.cli.commands import summary
from chunkeval.cli.output import print_prose
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.limits import check_path_length
from chunkeval.vocabulary import folded

WAREHOUSE_SESSION = False  # a repair may move the catalogue file aside: no connection may stay open


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "warehouse",
        help=summary("warehouse"),
    )
    wsub = p.add_subparsers(dest="warehouse_command", metavar="command", required=True)
    w = wsub.add_parser(
        "repair",
        help="move a damaged chunkeval.duckdb aside and rebuild it from the run manifests and pins",
        description="Rebuild the catalogue of runs from each run's manifest.json and the pinned baselines' files. "
        "A readable catalogue is kept; only manifests missing for older runs are written. Either way every completed "
        "run's results files are read whole: a run with a file that cannot be read is quarantined (status "
        "`quarantined` in `chunkeval runs`, the file moved aside to NAME.parquet.damaged) and comparisons leave it out.",
    )
    w.set_defaults(func=repair)
    s = wsub.add_parser(
        "snapshot",
        help="write a self-contained DuckDB file of the warehouse (one moment) to explore without blocking runs",
        description="Copy the catalogue's tables, and every view materialised as a table (the per-run results "
        "that query_results, gold_references and run_models read from Parquet included), into OUT: consistent "
        "at one moment, linked to nothing, and open as long as one likes while runs go on. The warehouse is "
        "held only while it is copied.",
    )
    s.add_argument("out", metavar="OUT.duckdb", help="the file to write (replaced whole if it exists)")
    s.set_defaults(func=snapshot)
    return p


def snapshot(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    check_path_length(args.out, "OUT.duckdb")
    done = warehouse().snapshot(args.out)
    print_prose(
        f"snapshot of {done['runs']} run(s) written to {done['path']} ({done['bytes'] / 1e6:.1f} MB, "
        f"tables {folded(done['tables'])}); open it with duckdb, e.g. "
        f"duckdb {done['path']} -c 'SELECT * FROM config_summary'"
    )
    return 0


def repair(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    wh = warehouse(must_exist=False)
    if not wh.exists() and not wh.results_dir.is_dir():
        raise InputError("no warehouse here: nothing to repair", wh.db_path)
    done = wh.repair()
    for q in done["quarantined"]:
        print_prose(f"run {q['run_id']} {q['why']}")
    if not done["damaged"]:
        print_prose(
            f"{wh.db_path} is readable: nothing to rebuild ({done['runs']} run(s); "
            f"{done['manifests_written']} manifest(s) written for runs that had none"
            + (f"; {len(done['quarantined'])} run(s) quarantined" if done["quarantined"] else "")
            + ")"
        )
    else:
        aside = f"the damaged file was moved to {done['moved_to']}; " if done["moved_to"] else ""
        print_prose(
            f"{wh.db_path} rebuilt from the run manifests: {aside}{done['runs']} run(s) and {done['pins']} pinned baseline(s) restored"
        )
        production = wh.recover_production(done["moved_to"])  # production lives only in the catalogue
        if production["problem"] is None:
            n = production["rows"]
            print_prose(f"production copied from the damaged file: {n['production_spans']:,} span(s) of "
                  f"{n['production_imports']:,} import(s), {n['production_results']:,} judged result(s)")  # fmt: skip
        else:
            print_prose(f"production could not be read from the damaged file ({production['problem']}): import the traces "
                  "again; judged results (traces compare) are lost")  # fmt: skip
    return 0
