"""`chunkeval runs`: the recorded runs, newest first; `runs delete` and `runs prune` remove them."""

from __future__ import annotations

import argparse

from chunkeval.cli.ages import parse_age
from chunkeval.cli.options import add_experiment, add_json, check_at_least_one
from chunkeval.cli.output import iso, print_json_rows
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.report.terminal import format_rows

WAREHOUSE_SESSION = True  # reads the catalogue, or removes runs in one short step

FIELDS = (  # of a run object of `runs --json`, in this order
    "run_id",
    "experiment",
    "status",
    "trigger",
    "started_at",
    "finished_at",
    "corpus_fingerprint",
    "gold_fingerprint",
    "model_fingerprint",
    "texts_embedded",
    "flow_run_id",
    "chunkeval_version",
    "error",
)
COLUMNS = [*FIELDS[:6], "texts_embedded", "corpus", "model"]  # of the table; corpus and model are fingerprints


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("runs", help="list the recorded runs, newest first (`runs delete`, `runs prune` remove them)")
    add_experiment(p, "only this experiment's runs")
    add_json(p, "print a JSON list of run objects")
    p.set_defaults(func=run)
    rsub = p.add_subparsers(dest="runs_command", metavar="command")
    d = rsub.add_parser("delete", help="remove runs with their files (never the pinned baseline)")
    d.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    d.set_defaults(func=delete)
    d = rsub.add_parser("prune", help="remove an experiment's old runs with their files, keeping the pinned baseline")
    add_experiment(d, required=True, dest="prune_experiment")
    d.add_argument("--keep-last", type=int, metavar="K", help="keep the newest K runs")
    d.add_argument("--older-than", metavar="AGE", help="remove runs started more than AGE ago: 36h, 90d, 12w")
    d.set_defaults(func=prune)
    return p


def run(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    """The list of runs."""
    wh = warehouse(must_exist=False)
    if not wh.exists():
        print("no runs recorded")
        return 0
    if args.experiment:
        wh.check_experiment(args.experiment)
    docs = [
        {**{f: (iso(r[f]) if f.endswith("_at") else r[f]) for f in FIELDS}, "skipped": r["status"] == "skipped"}
        for r in wh.runs(args.experiment)
    ]
    if args.json:
        print_json_rows(docs)
        return 0
    table = [
        [
            d["run_id"],
            d["experiment"],
            d["status"],
            d["trigger"],
            d["started_at"] or "",
            d["finished_at"] or "",
            str(d["texts_embedded"] or 0),
            (d["corpus_fingerprint"] or "")[:12],
            (d["model_fingerprint"] or "")[:12],
        ]
        for d in docs
    ]
    print(format_rows(COLUMNS, table) if table else "no runs recorded")
    return 0


def delete(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    for run_id in warehouse().delete_runs(args.run_ids):
        print(f"deleted run {run_id}")
    return 0


def prune(args: argparse.Namespace, warehouse: WarehouseAccess) -> int:
    age = parse_age(args.older_than, "--older-than") if args.older_than else None
    wh = warehouse()
    if (args.keep_last is None) == (age is None):
        raise InputError("prune takes one of --keep-last K or --older-than AGE")
    check_at_least_one(args.keep_last, "--keep-last")
    deleted, kept = wh.prune(args.prune_experiment, args.keep_last, age)
    print(f"deleted {len(deleted)} run(s) of experiment {args.prune_experiment}")
    if kept:
        print(f"kept run {kept}: it is the pinned baseline (pin another with `chunkeval baseline` to let it go)")
    return 0
