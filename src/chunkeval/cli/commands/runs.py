"""`chunkeval runs`: the recorded runs, newest first; `runs delete` and `runs prune` remove them."""

from __future__ import annotations

import argparse
import re

from chunkeval.cli.ages import parse_age
from chunkeval.cli.commands import summary
from chunkeval.cli.options import add_experiment, add_json, check_at_least_one
from chunkeval.cli.output import iso, print_json_rows
from chunkeval.cli.session import WarehouseAccess
from chunkeval.errors import InputError
from chunkeval.report.terminal import format_rows
from chunkeval.visible import visible
from chunkeval.warehouse.tables import raced

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
# of the table, within 120 columns: started to the minute, the seconds it took, fingerprints by their first 8
COLUMNS = ["run_id", "experiment", "status", "trigger", "started (UTC)", "seconds", "embedded", "corpus", "model"]
REASON_WIDTH = 116  # a failed, skipped or coalesced run's reason, on the line below it, cut to fit


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("runs", help=summary("runs"))
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
    rows = wh.runs(args.experiment)
    docs = [
        {**{f: (iso(r[f]) if f.endswith("_at") else r[f]) for f in FIELDS}, "skipped": r["status"] == "skipped"}
        for r in rows
    ]
    if args.json:
        print_json_rows(docs)
        return 0
    table, reasons = [], {}
    for r, d in zip(rows, docs):
        took = (r["finished_at"] - r["started_at"]).total_seconds() if r["finished_at"] and r["started_at"] else None
        table.append(
            [
                d["run_id"],
                d["experiment"],
                "raced" if d["status"] == "completed" and raced(r["settings"]) else d["status"],  # on part of it
                d["trigger"],
                r["started_at"].strftime("%Y-%m-%d %H:%M") if r["started_at"] else "",
                "" if took is None else f"{took:.0f}",
                str(d["texts_embedded"] or 0),
                (d["corpus_fingerprint"] or "")[:8],
                (d["model_fingerprint"] or "")[:8],
            ]
        )
        if d["error"] and d["status"] != "completed":  # why it failed, was skipped, coalesced or quarantined
            reasons[len(table) - 1] = _reason(d["error"])
    if not table:
        print("no runs recorded")
        return 0
    lines = format_rows(COLUMNS, table).splitlines()
    out = lines[:2]
    for i, line in enumerate(lines[2:]):
        out.append(line)
        if i in reasons:
            out.append(f"  └ {reasons[i]}")
    print("\n".join(out))
    return 0


def _reason(text: str) -> str:
    """A run's reason on one line of the table's width: its last line, chunkeval's own errors without their class
    (`chunkeval.errors.InputError: `), and a line too long cut in its middle (a file's path is long, and what went
    wrong is said at the end)."""
    line = " ".join(str(text).strip().splitlines()[-1].split()) if str(text).strip() else ""
    line = visible(re.sub(r"^chunkeval\.[\w.]+Error: ", "", line))
    if len(line) <= REASON_WIDTH:
        return line
    head = REASON_WIDTH // 5
    return line[:head] + "…" + line[len(line) - (REASON_WIDTH - head - 1) :]


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
